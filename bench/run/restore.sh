#!/usr/bin/env bash
# Restore time vs size — kioku's restore by mapping, its earlier eager restore
# (KIOKU_EAGER_RESTORE=1, the baseline), CRIU and DMTCP, interleaved run by run on the same
# program (bench/run/restore.py). Writes the `run-restore` section of docs/perf.md and
# docs/perf/run-restore.png.
#
# Usage: bench/run/restore.sh     (about 10 minutes on a 2-core machine with the peers)
# Env: SIZES (MiB, default "64 256 512 1024"), REPS (default 3), NO_WRITE=1 (print only),
#      CRIU=…/criu, DMTCP_LAUNCH=…/dmtcp_launch (built by bench/run/peers.sh; a missing peer is
#      skipped, saying so), KIOKU_BIN (a kioku binary to use instead of building one). Needs
#      root (CRIU).
. "$(dirname "$0")/common.sh" crates bench

echo "== build" >&2
# KIOKU_BIN: a kioku built already (else target/release/kioku, built here).
[ -n "${KIOKU_BIN:-}" ] || cargo build --release -q -p kioku-cli
"${CC:-cc}" -O2 -o "$work/resume" bench/run/resume.c
mkdir -p docs/perf
plot=$root/docs/perf/run-restore.png
[ -n "${NO_WRITE:-}" ] && plot=$work/run-restore.png

body=$(BENCH_BIN="$work" BENCH_SHM="$shm" PLOT="$plot" python3 bench/run/restore.py)
end=$(date -u +%s)
criu_v=$( [ -n "${CRIU:-}" ] && "$CRIU" --version 2>/dev/null | head -1 || echo "none")
dmtcp_v=$( [ -n "${DMTCP_LAUNCH:-}" ] && "$DMTCP_LAUNCH" --version 2>/dev/null | head -1 || echo "none")
section=$(cat <<MD
### Restore time vs size (restore part of issue 18)

Command: \`CRIU=… DMTCP_LAUNCH=… bench/run/restore.sh\` (source $src; $(nproc) cores; load
average $load_start at the start, $(cut -d" " -f1-3 /proc/loadavg) at the end;
$(( (end - start) / 60 )) minutes; peers: ${criu_v}, ${dmtcp_v}). The program
(\`bench/run/resume.c\`) writes its memory, is checkpointed, killed and restored; images and
pools on /dev/shm; tools interleaved run by run; medians of REPS=${REPS:-3}. *runs*: from the
restore command's start until the program runs again (it notes the time itself); *all read*:
until it has since read every page of its memory once — what a lazy restore defers is paid by
then. *kioku eager* is the earlier restore (every page written in before the program runs:
\`KIOKU_EAGER_RESTORE=1\`).

$body
MD
)
echo "$section" | write_section run-restore
