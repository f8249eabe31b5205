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
start=$(date -u +%s)
load_start=$(cut -d" " -f1-3 /proc/loadavg)
src="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -n "$(git status --porcelain -- crates bench include examples 2>/dev/null | head -1)" ] &&
  src="$src + uncommitted changes"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo build -q --release -p kioku-dsm
lib=$root/target/release
cc -std=c11 -O2 -Iinclude examples/dsm/laplace.c -L"$lib" -Wl,-rpath,"$lib" -lkioku_dsm -o "$work/laplace"
cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Iinclude bench/dsm/micro.c -L"$lib" -Wl,-rpath,"$lib" -lkioku_dsm -o "$work/micro"
mpicc -O2 bench/dsm/laplace_mpi.c -o "$work/laplace_mpi"

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

$body
MD
)
if [ -z "${NO_WRITE:-}" ]; then
  printf '%s\n' "$section" | python3 bench/perf_section.py dsm
  echo "wrote the dsm section of docs/perf.md and $plot" >&2
fi
printf '%s\n' "$section"
