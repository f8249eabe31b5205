#!/usr/bin/env bash
# Transparent process checkpoints (`kioku run` / `kioku restore`): overhead on the pi spigot and
# xz against plain runs, stop time vs dirty MiB, a naive dump of the same process, the disk's
# write bandwidth, restore time vs resident MiB — all in one run (bench/run/bench.py).
# Writes the `run` section of docs/perf.md.
#
# Usage: bench/run/run.sh      (about 12 minutes on a 2-core machine)
# Env: PI_REPS (default 3), XZ_REPS (default 3), XZ_MIB (xz input, default 24),
#      NO_WRITE=1 (print the section only).
BENCH_DISK_DIR=run . "$(dirname "$0")/common.sh" crates examples bench

echo "== build" >&2
cargo build --release -q -p kioku-cli
CC=${CC:-cc}
"$CC" -O2 -o "$work/pi" examples/proc/pi.c
"$CC" -O2 -o "$work/dirty" bench/run/dirty.c
"$CC" -O2 -o "$work/naive_dump" bench/run/naive_dump.c
command -v xz >/dev/null || { echo "xz is missing: apt-get install xz-utils" >&2; exit 1; }

body=$(BENCH_BIN="$work" BENCH_SHM="$shm" BENCH_DISK="$disk" python3 bench/run/bench.py)
end=$(date -u +%s)
section=$(cat <<MD
Command: \`bench/run/run.sh\` (source $src; $(nproc) cores; load average $load_start at the start,
$(cut -d" " -f1-3 /proc/loadavg) at the end; $(( (end - start) / 60 )) minutes). Medians of
PI_REPS=${PI_REPS:-3} runs for pi, XZ_REPS=${XZ_REPS:-3} for xz. "Stop" is what the program
sees: from the monitor's stop request to its resume; making the checkpoint durable and syncing
the other context happen afterwards on the monitor's core while the program runs.

$body
MD
)
echo "$section" | write_section run
