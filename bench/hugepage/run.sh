#!/usr/bin/env bash
# Huge pages that follow the application (issue 14): HPS's micro-benchmark — 1 GiB of 4 KiB
# objects accessed in sequential, random and skewed (a random third) orders, 16 sets per round,
# 80 and 400 rounds — Default (THP never for the arena) vs THP always (for the arena) vs kioku
# with either sampling backend; throughput over rounds and memory over time. Also the tracker's
# cost per scan and per GiB, and its overhead on the workload (tracking without placement,
# interleaved with its baseline). Writes the `hugepage` section of docs/perf.md and
# docs/hugepage-throughput.png, docs/hugepage-memory.png.
#
# The machine is shared: every run of a mode alternates with the runs of the others (MAIN_REPS
# rounds of all modes, in turn), and the report takes medians over the repetitions.
#
# Usage: bench/hugepage/run.sh        (about an hour on a loaded 2-core machine; the env below
#        selects parts)
# Env: SIZE (bytes, default 1 GiB), ROUNDS (80), LONG_ROUNDS (400; 0 skips the long runs),
#      MAIN_REPS (3), PATTERNS (of the main runs: "seq random skewed"),
#      REPS (overhead runs per mode, 3), OVERHEAD_ROUNDS (1200: long enough to see sampling
#      converge and drop to the steady budget), OVERHEAD_PATTERNS ("skewed random"),
#      OVERHEAD_SIZE (bytes of the overhead runs, default 256 MiB: converges within the run),
#      FAST_BUDGET (if set, also kioku at that constant steady CPU budget, e.g. 0.1),
#      COST_SIZES (bytes tracked in the cost runs, default 256 MiB, 1 GiB, 4 GiB; "" skips),
#      NO_WRITE=1 (print the section only; plots go to the work directory).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
SIZE=${SIZE:-1073741824}
ROUNDS=${ROUNDS:-80}
LONG_ROUNDS=${LONG_ROUNDS:-400}
REPS=${REPS:-3}
MAIN_REPS=${MAIN_REPS:-3}
PATTERNS=${PATTERNS:-seq random skewed}
OVERHEAD_ROUNDS=${OVERHEAD_ROUNDS:-1200}
OVERHEAD_SIZE=${OVERHEAD_SIZE:-268435456}
OVERHEAD_PATTERNS=${OVERHEAD_PATTERNS:-skewed random}
FAST_BUDGET=${FAST_BUDGET:-}
COST_SIZES=${COST_SIZES-268435456 1073741824 4294967296}
. bench/provenance.sh
provenance crates bench
python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install -q matplotlib
cargo build --release -q -p kioku-hugepage --bin hugepage-bench
bin="${CARGO_TARGET_DIR:-$root/target}/release/hugepage-bench"
out=$(mktemp -d)
echo "== results in $out" >&2

echo "== tracker cost" >&2
: >"$out/cost.jsonl"
for b in refault protnone; do
  for s in $COST_SIZES; do
    "$bin" cost --backend "$b" --size "$s" --sample 4096 >>"$out/cost.jsonl"
  done
done

echo "== tracking overhead (interleaved with its baseline)" >&2
for rep in $(seq "$REPS"); do
  for pat in $OVERHEAD_PATTERNS; do
    for m in default track-protnone default-shm track-refault; do
      echo "   $rep $pat $m" >&2
      "$bin" workload --mode "$m" --pattern "$pat" --size "$OVERHEAD_SIZE" --rounds "$OVERHEAD_ROUNDS" \
        | grep '"round"' >"$out/overhead-$rep-$pat-$m.jsonl"
    done
  done
done

echo "== $ROUNDS rounds, $MAIN_REPS times" >&2
for rep in $(seq "$MAIN_REPS"); do
  for pat in $PATTERNS; do
    for m in default thp kioku-refault kioku-protnone; do
      echo "   $rep $pat $m" >&2
      "$bin" workload --mode "$m" --pattern "$pat" --size "$SIZE" --rounds "$ROUNDS" >"$out/main-$pat-$m-$rep.jsonl"
    done
  done
  # kioku at a larger constant steady budget (skewed only), if asked for.
  for m in $([ -n "$FAST_BUDGET" ] && echo kioku-refault kioku-protnone); do
    echo "   $rep skewed $m, budget $FAST_BUDGET" >&2
    "$bin" workload --mode "$m" --pattern skewed --size "$SIZE" --rounds "$ROUNDS" --cpu-budget "$FAST_BUDGET" \
      >"$out/main-skewed-$m-fast-$rep.jsonl"
  done
done

echo "== $LONG_ROUNDS rounds, skewed" >&2
for m in $([ "$LONG_ROUNDS" -gt 0 ] && echo default thp kioku-refault kioku-protnone); do
  echo "   $m" >&2
  "$bin" workload --mode "$m" --pattern skewed --size "$SIZE" --rounds "$LONG_ROUNDS" >"$out/long-skewed-$m-1.jsonl"
done
for m in $([ "$LONG_ROUNDS" -gt 0 ] && [ -n "$FAST_BUDGET" ] && echo kioku-refault kioku-protnone); do
  echo "   $m, budget $FAST_BUDGET" >&2
  "$bin" workload --mode "$m" --pattern skewed --size "$SIZE" --rounds "$LONG_ROUNDS" --cpu-budget "$FAST_BUDGET" \
    >"$out/long-skewed-$m-fast-1.jsonl"
done

end=$(date -u +%s)
plots="$root/docs"
[ -n "${NO_WRITE:-}" ] && plots="$out"
body=$(FAST_BUDGET=$FAST_BUDGET PATTERNS=$PATTERNS python3 bench/hugepage/report.py "$out" "$plots" "$ROUNDS" "$LONG_ROUNDS")
section=$(cat <<MD
## Huge pages that follow the application (kioku-hugepage)

Command: \`bench/hugepage/run.sh\` (source $src; $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo);
Linux $(uname -r), THP \`$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled)\`, shmem THP
\`$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/shmem_enabled)\`; load average $load_start at the start,
$(cut -d" " -f1-3 /proc/loadavg) at the end; $(( (end - start) / 60 )) minutes; SIZE=$SIZE, OVERHEAD_SIZE=$OVERHEAD_SIZE,
PATTERNS="$PATTERNS", MAIN_REPS=$MAIN_REPS, LONG_ROUNDS=$LONG_ROUNDS, REPS=$REPS, OVERHEAD_ROUNDS=$OVERHEAD_ROUNDS, OVERHEAD_PATTERNS="$OVERHEAD_PATTERNS").
Program: \`hugepage-bench\` (crates/hugepage/src/bin). All modes run the same program (objects reached
through a table); only the arena's memory and its management differ.

$body
MD
)
if [ -n "${NO_WRITE:-}" ]; then
  echo "$section"
else
  echo "$section" | python3 bench/perf_section.py hugepage
  echo "docs/perf.md: section hugepage updated" >&2
fi
