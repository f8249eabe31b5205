#!/usr/bin/env bash
# Group checkpoints of MPI programs: the thesis's two workloads (MAT: few pages change per
# interval; LU-like: many) on 8 ranks, each with MIB of protected memory, checkpointed at the
# rs level (RS(6,2) over one group of 8) every interval — (a) full checkpoints with full
# encoding (KIOKU_FULL=1) and (b) kioku's incremental delta parity, in the same run; then the
# recovery time of 1 and 2 lost ranks against their data size.
# Writes the `group` section of docs/perf.md.
#
# Usage: bench/group/run.sh      (about 6 minutes on a 2-core machine)
# Env: MIB (per rank, default 256), INTERVALS (default 8), NO_WRITE=1 (print only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
start=$(date -u +%s)
load_start=$(cut -d" " -f1-3 /proc/loadavg)
src="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -n "$(git status --porcelain -- crates examples bench include 2>/dev/null | head -1)" ] &&
  src="$src + uncommitted changes"

work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/kioku-group-bench.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT

echo "== build" >&2
cargo build --release -q -p kioku-group
lib="$root/target/release"
mpicc -O2 -I include -o "$work/workload" bench/group/workload.c -L"$lib" -lkioku_group \
  -Wl,-rpath,"$lib" -lm

body=$(BENCH_BIN="$work" BENCH_SHM="$shm" python3 bench/group/bench.py)
end=$(date -u +%s)
section=$(cat <<MD
Command: \`bench/group/run.sh\` (source $src; $(nproc) cores; load average $load_start at the
start, $(cut -d" " -f1-3 /proc/loadavg) at the end; $(( (end - start) / 60 )) minutes). Pools on
/dev/shm (medium shm). 8 ranks oversubscribed on these cores with Open MPI's \`mpirun\`, one group
of 8 (RS(6,2): every rank holds parity of two stripes). "Bytes" are what all ranks sent to each
other per checkpoint; "time" is the slowest rank's \`kioku_group_checkpoint\` (local checkpoint
+ encoding + two-phase commit). Averages over intervals 1..N (interval 0, the first checkpoint,
is full in both modes and not counted).

$body
MD
)
if [ -z "${NO_WRITE:-}" ]; then
  printf '%s\n' "$section" | python3 bench/perf_section.py group
  echo "wrote the group section of docs/perf.md" >&2
fi
printf '%s\n' "$section"
