#!/usr/bin/env bash
# Group checkpoints of MPI programs: the thesis's two workloads (MAT: ~1 % of the pages change
# per interval; LU-like: ~50 %) on 8 ranks, one group of 8, rs level every interval, at each
# MiB per rank of MIBS and each m of MS — with the library before this work (BEFORE, built
# from that commit in a scratch directory) and this tree's, in the same run, and with FTI's
# level 3 when FTI names an FTI install (include/, lib/); then the recovery of one lost rank.
# Writes the `group` section of docs/perf.md and docs/perf/group.png.
#
# Usage: FTI=/path/to/fti bench/group/run.sh   (about 25 minutes on a 2-core machine)
# FTI (github.com/leobago/fti, 1.6), built outside the repository: cmake -S fti -B build
#   -DCMAKE_BUILD_TYPE=Release -DENABLE_EXAMPLES=OFF -DENABLE_FORTRAN=OFF
#   -DCMAKE_INSTALL_PREFIX=/path/to/fti && cmake --build build -j2 && cmake --install build
# Env: MIBS (default "64 256"), MS (default "2 4"), INTERVALS (default 4), BEFORE (a commit,
# default c6eff64: the group library with self-healing and background encoding, before exact and freed redo logs),
# NO_WRITE=1 (print only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/provenance.sh
provenance crates examples bench include
before=${BEFORE:-c6eff64}

work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/kioku-group-bench.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT

echo "== build" >&2
cargo build --release -q -p kioku-group
lib="$root/target/release"
mpicc -O2 -I include -o "$work/workload" bench/group/workload.c -L"$lib" -lkioku_group \
  -Wl,-rpath,"$lib" -lm
mkdir -p "$work/before"
git archive "$before" | tar -x -C "$work/before"
(cd "$work/before" && CARGO_TARGET_DIR="${BEFORE_TARGET:-$work/before/target}" \
  cargo build --release -q -p kioku-group)
blib="${BEFORE_TARGET:-$work/before/target}/release"
mpicc -O2 -I "$work/before/include" -o "$work/workload_before" bench/group/workload.c \
  -L"$blib" -lkioku_group -Wl,-rpath,"$blib" -lm
fti_note="FTI not measured (set FTI to an FTI install)"
if [ -n "${FTI:-}" ]; then
  mpicc -O2 -I "$FTI/include" -o "$work/fti_workload" bench/group/fti_workload.c \
    -L"$FTI/lib" -lfti -Wl,-rpath,"$FTI/lib" -lm
  fti_note="FTI $(cat "$FTI/VERSION" 2>/dev/null || echo 1.6) built from source (Release), POSIX I/O"
fi

mkdir -p docs/perf
body=$(BENCH_BIN="$work" BENCH_SHM="$shm" PLOT="$root/docs/perf/group.png" \
  python3 bench/group/bench.py)
end=$(date -u +%s)
section=$(cat <<MD
Command: \`FTI=<fti install> bench/group/run.sh\` (source $src, before = $before; $fti_note;
$(nproc) cores; load average $load_start at the start, $(cut -d" " -f1-3 /proc/loadavg) at the
end; $(( (end - start) / 60 )) minutes). Pools and FTI's files on /dev/shm. 8 ranks
oversubscribed on these cores with Open MPI's \`mpirun\` (4.1, no ULFM).

$body
MD
)
if [ -z "${NO_WRITE:-}" ]; then
  printf '%s\n' "$section" | python3 bench/perf_section.py group
  echo "wrote the group section of docs/perf.md" >&2
fi
printf '%s\n' "$section"
