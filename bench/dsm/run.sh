#!/usr/bin/env bash
# The DSM (kioku-dsm) in one run: the seed's Laplace (Jacobi) on 1024² and 4096² on 1, 2, 4
# (and 8) node processes over shared memory against the same kernel with Open MPI (halo
# exchange) on the same machine; barrier and 4 KiB page-fetch latency (the seed's 24 B / 4 KB
# figures); checkpoint time against image size per node. Every Laplace result is checked
# against MPI's (the same FNV-1a of the grid). Writes the `dsm` section of docs/perf.md and
# docs/img/dsm-laplace.png.
#
# Usage: bench/dsm/run.sh [--quick]      Env: NO_WRITE=1 (print only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
quick=${1:-}
. bench/provenance.sh
provenance crates bench include examples
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build -q --release -p kioku-dsm
lib=$root/target/release
cc -std=c11 -O2 -Iinclude examples/dsm/laplace.c -L"$lib" -Wl,-rpath,"$lib" -lkioku_dsm -o "$work/laplace"
cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Iinclude bench/dsm/micro.c -L"$lib" -Wl,-rpath,"$lib" -lkioku_dsm -o "$work/micro"
mpicc -O2 bench/dsm/laplace_mpi.c -o "$work/laplace_mpi"
mpicc -O2 bench/dsm/xfer_mpi.c -o "$work/xfer_mpi"

seq=0
# dsm_job NODES PROGRAM ARGS... : runs NODES processes of PROGRAM as one DSM job; node 0's output.
dsm_job() {
  local nodes=$1; shift
  seq=$((seq + 1))
  local job="bench$$-$seq" pids=()
  for ((i = 0; i < nodes; i++)); do
    KIOKU_MCAPI_JOB=$job KIOKU_MCAPI_NODES=$nodes KIOKU_DSM_NODE=$i "$@" >"$work/out.$i" 2>"$work/err.$i" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { cat "$work"/err.*; exit 1; }; done
  cat "$work"/out.*
}
mpi_job() {
  local nodes=$1; shift
  mpirun --allow-run-as-root --oversubscribe -np "$nodes" "$@"
}

results=$work/results.txt
: >"$results"
if [ "$quick" = --quick ]; then
  sizes=("1024 50"); counts=(1 2 4); ckpt=(1 16 64)
else
  sizes=("1024 100" "4096 10"); counts=(1 2 4 8); ckpt=(1 4 16 64)
fi
for sz in "${sizes[@]}"; do
  set -- $sz
  for nodes in "${counts[@]}"; do
    for round in 1 2; do
      d=$(dsm_job "$nodes" "$work/laplace" "$1" "$2")
      m=$(mpi_job "$nodes" "$work/laplace_mpi" "$1" "$2")
      dr=$(sed -n 's/^RESULT=//p' <<<"$d"); mr=$(sed -n 's/^RESULT=//p' <<<"$m")
      [ "$dr" = "$mr" ] || { echo "DSM $dr and MPI $mr differ at $1 on $nodes" >&2; exit 1; }
      echo "laplace n=$1 iters=$2 nodes=$nodes round=$round dsm=$(sed -n 's/^TIME_S=//p' <<<"$d") mpi=$(sed -n 's/^TIME_S=//p' <<<"$m")" >>"$results"
    done
  done
done
dsm_job 2 "$work/micro" 2000 500 4 "${ckpt[@]}" >>"$results"
# The peer of a checkpoint: the same bytes moved to the neighbour rank with Open MPI.
mpi_job 2 "$work/xfer_mpi" "${ckpt[@]}" >>"$results"

# Recovery: 4 nodes and a standby; node 2 is SIGKILLed at its 40th barrier (in sweep 28; with
# --ft 10 the job goes back to the checkpoint of sweep 20); the survivors' time in the call that returned
# KIOKU_DSM_EROLLEDBACK (detection, agreement, the image from the buddy to the standby, the
# restore, the barrier), and the image size per node.
# recover_job GRID SWEEPS: appends a RECOVERY line.
recover_job() {
  seq=$((seq + 1))
  local job="bench$$-$seq" pids=()
  for ((i = 0; i < 5; i++)); do
    local fp=
    [ "$i" = 2 ] && fp=barrier:40
    KIOKU_MCAPI_JOB=$job KIOKU_MCAPI_NODES=5 KIOKU_DSM_STANDBYS=1 KIOKU_DSM_NODE=$i \
      KIOKU_DSM_FAILPOINT=$fp "$work/laplace" "$1" "$2" --ft 10 >"$work/rout.$i" 2>"$work/rerr.$i" &
    pids+=($!)
  done
  for i in 0 1 3 4; do wait "${pids[$i]}" || { cat "$work"/rerr.*; exit 1; }; done
  wait "${pids[2]}" || true
  local r s
  r=$(sed -n 's/^RESULT=//p' "$work/rout.0")
  s=$(sed -n 's/^RECOVERY_S=//p' "$work/rout.0")
  local m
  m=$(mpi_job 4 "$work/laplace_mpi" "$1" "$2" | sed -n 's/^RESULT=//p')
  [ "$r" = "$m" ] || { echo "recovered DSM $r and MPI $m differ at $1" >&2; exit 1; }
  echo "RECOVERY n=$1 image_mib=$(( $1 * $1 * 16 / 4 >> 20 )) s=$s" >>"$results"
}
if [ "$quick" = --quick ]; then
  recover_job 1024 50
else
  recover_job 1024 50
  recover_job 4096 45
fi
end=$(date -u +%s)
cat "$results" >&2

plot=docs/img/dsm-laplace.png
[ -n "${NO_WRITE:-}" ] && plot=$work/dsm-laplace.png
body=$(python3 bench/dsm/report.py "$results" "$plot")
section=$(cat <<MD
## DSM (kioku-dsm): Laplace against Open MPI, latencies, checkpoints

Command: \`bench/dsm/run.sh $quick\` (source $src; $(nproc) cores, Linux $(uname -r); load
average $load_start at the start, $(cut -d" " -f1-3 /proc/loadavg) at the end; $(( end - start )) s).
Node processes on one machine over shared memory (MCAPI's default topology); the DSM kernel is
\`examples/dsm/laplace.c\` (release build of \`libkioku_dsm\`), the MPI one
\`bench/dsm/laplace_mpi.c\` (Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}'), \`mpirun --oversubscribe\`),
the same row blocks and the same sweeps; both give the same grid (checked every run). Times
are of the sweeps only, the better of two runs. More processes than cores (2) share them.
Checkpoints are compared with \`bench/dsm/xfer_mpi.c\`: the same bytes sent to the neighbour
rank with Open MPI (MPI_Sendrecv), the data movement of a checkpoint into the buddy.

$body
MD
)
if [ -z "${NO_WRITE:-}" ]; then
  printf '%s\n' "$section" | python3 bench/perf_section.py dsm
  echo "wrote the dsm section of docs/perf.md and $plot" >&2
fi
printf '%s\n' "$section"
