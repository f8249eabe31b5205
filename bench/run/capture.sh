#!/usr/bin/env bash
# The capture side of process checkpoints: stop vs dirty MiB (kioku reported and program-seen,
# this tree against its previous behaviour, CRIU and DMTCP), the first checkpoint, xz -T2
# overheads — all in one run (bench/run/capture.py). Writes the `run-capture` section of
# docs/perf.md and docs/perf/run-capture.png.
#
# Usage: bench/run/capture.sh      (about 10 minutes on a 2-core machine)
# Env: CRIU=path/to/criu, DMTCP_LAUNCH=path/to/dmtcp_launch or PEERS=dir (peers; each skipped,
#      saying so, when not found), STALL_MIB (512), STALL_SECS (6), STALL_INTERVAL (0.5 s),
#      STALL_PCTS (1,10,50,100), XZ_REPS (3), SORT_REPS (3), NO_WRITE=1 (print the section only).
BENCH_DISK_DIR=capture . "$(dirname "$0")/common.sh" crates examples bench

# PEERS=dir: where bench/run/peers.sh installed CRIU ($PEERS/criu) and DMTCP ($PEERS/dmtcp).
if [ -z "${CRIU:-}" ] && [ -n "${PEERS:-}" ] && [ -x "$PEERS/criu/sbin/criu" ]; then CRIU="$PEERS/criu/sbin/criu"; fi
# DMTCP only when given (DMTCP_LAUNCH): here `dmtcp_command --bcheckpoint` returned without writing an image.
export CRIU="${CRIU:-}" DMTCP_LAUNCH="${DMTCP_LAUNCH:-}"

mkdir -p docs/perf

echo "== build" >&2
cargo build --release -q -p kioku-cli
"${CC:-cc}" -O2 -o "$work/stall" bench/run/stall.c
command -v xz >/dev/null || { echo "xz is missing: apt-get install xz-utils" >&2; exit 1; }

plot=docs/perf/run-capture.png
[ -n "${NO_WRITE:-}" ] && plot="$work/run-capture.png"
body=$(BENCH_BIN="$work" BENCH_SHM="$shm" BENCH_DISK="$disk" BENCH_PLOT="$plot" python3 bench/run/capture.py)
end=$(date -u +%s)
section=$(cat <<MD
### Capture (issue 18: honest stops, durable answers, the first checkpoint, full checkpoints to disk)

Command: \`bench/run/capture.sh\` (source $src; $(nproc) cores; load average $load_start at the
start, $(cut -d" " -f1-3 /proc/loadavg) at the end; $(( (end - start) / 60 )) minutes).

$body
MD
)
echo "$section" | write_section run-capture
