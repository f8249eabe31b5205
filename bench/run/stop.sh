#!/usr/bin/env bash
# The stop floor of a small program and the monitor's CPU (issue 18): the pi spigot
# (examples/proc/pi.c, ~0.6 MiB captured) checkpointed every 10 ms, and xz -T2 -6 on 50 MiB of
# text at 1 s and 100 ms — plain, under BASE_KIOKU (the kioku before this work) and under this
# tree's kioku, interleaved run by run (bench/run/stop.py). Writes the `run-stop` section of
# docs/perf.md.
#
# Usage: BASE_KIOKU=/path/to/old/kioku bench/run/stop.sh      (about 10 minutes on 2 cores)
# Env: PI_DIGITS (20000), PI_REPS (3; 0 skips pi), XZ_REPS (1; 0 skips xz), RT=1 (run pi and its monitor
#      under SCHED_FIFO priority 5 — needs root; takes most of the scheduler's noise out of the
#      pi rows on a loaded machine; xz always runs at normal priority), NO_WRITE=1 (print only).
. "$(dirname "$0")/common.sh" crates examples bench

echo "== build" >&2
cargo build --release -q -p kioku-cli
"${CC:-cc}" -O2 -o "$work/pi" examples/proc/pi.c
command -v xz >/dev/null || { echo "xz is missing: apt-get install xz-utils" >&2; exit 1; }

body=$(BENCH_BIN="$work" BENCH_SHM="$shm" KIOKU="$root/target/release/kioku" python3 bench/run/stop.py)
end=$(date -u +%s)
section=$(cat <<MD
### Stop floor and monitor CPU (issue 18: a small program at 10 ms, xz -T2 at 1 s / 100 ms)

Command: \`BASE_KIOKU=… ${RT:+RT=1 }bench/run/stop.sh\` (source $src; $(nproc) cores; load average
$load_start at the start, $(cut -d" " -f1-3 /proc/loadavg) at the end; $(( (end - start) / 60 )) minutes).

$body
MD
)
echo "$section" | write_section run-stop
