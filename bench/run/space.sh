#!/usr/bin/env bash
# Space of process checkpoints: pool size and monitor RSS against the program's peak RSS, for
# xz -9, a Python dict builder, sort -S 200M, a JVM (-Xmx2g) and a program that maps 8 GiB and
# touches 8 MiB (bench/run/space.py), for this tree's kioku and, when BASE_KIOKU names another
# kioku binary (e.g. one built from main), for that one in the same run.
# Writes the `run-space` section of docs/perf.md and docs/perf/run-space.png.
#
# Usage: [BASE_KIOKU=/path/to/kioku-of-main] bench/run/space.sh     (about 6 minutes)
# Env: SPACE_PROGRAMS (subset, e.g. "xz,JVM"), NO_WRITE=1 (print the section only),
#      SPACE_REUSE=FILE (rows of an earlier run, its stderr, for kiokus not measured again).
# Needs xz, sort, python3, java + javac (openjdk-17-jdk-headless), /usr/bin/time (time).
. "$(dirname "$0")/common.sh" crates bench
for t in xz sort java javac /usr/bin/time; do
  command -v "$t" >/dev/null || { echo "$t is missing (see the header of $0)" >&2; exit 1; }
done

echo "== build" >&2
cargo build --release -q -p kioku-cli
"${CC:-cc}" -O2 -o "$work/reserve" examples/proc/reserve.c
bins="this=$root/target/release/kioku"
if [ -n "${BASE_KIOKU:-}" ]; then
  bins="base=$BASE_KIOKU,$bins"
else
  echo "BASE_KIOKU not set: measuring this tree only" >&2
fi
mkdir -p docs/perf
body=$(BENCH_BIN="$work" BENCH_SHM="$shm" KIOKU_BINS="$bins" BENCH_PLOT="docs/perf/run-space.png" SPACE_REUSE="${SPACE_REUSE:-}" \
  python3 bench/run/space.py)
end=$(date -u +%s)
section=$(cat <<MD
### Space: pool and monitor against the program's peak RSS

Command: \`BASE_KIOKU=… bench/run/space.sh\` (source $src; $(nproc) cores; load average
$load_start at the start, $(cut -d" " -f1-3 /proc/loadavg) at the end; $(( (end - start) / 60 ))
minutes). Each program runs plainly under \`/usr/bin/time\` (peak RSS of its largest process),
then under \`kioku run --medium shm --interval 1s\` with each kioku; every 50 ms the pool file's
allocated bytes (what it takes of /dev/shm) and length, and the monitor's VmRSS (anonymous, and
pool pages it has mapped) are sampled: the peaks are shown. "base" is the kioku named by
BASE_KIOKU (main before this work), "this" the tree's. One run each; a run that would leave the
machine under 3 GiB of available memory is killed (said in the last column).

$body

![pool ÷ peak RSS and monitor RSS](perf/run-space.png)

Reading it: the pool's peak is the program's captured memory once plus the pages written in one
epoch while that checkpoint is between its two commits (the valid copy and the new pages side by
side until the new pages have moved); a program that rewrites most of its memory every second
(xz, sort) peaks near twice, a program that rewrites little stays near its memory. At rest (after
a checkpoint, the \`at rest\` figures in bench/run/space.py's log) the pool is the memory once.
"Peak RSS" counts the program's mapped files (libraries, the JVM's classes), which the pool does
not hold, and not memory it freed before the peak, which a checkpoint may have held. The
monitor's VmHWM counts the pool pages it maps while copying a checkpoint's pages in (what it
must buffer); it lets go of them after each checkpoint past 32 MiB.
MD
)
echo "$section" | write_section run-space
