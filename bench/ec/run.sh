#!/usr/bin/env bash
# Erasure-coding benchmark: kioku-ec beside ISA-L (direct from C), Jerasure 2,
# reed-solomon-simd and a plain memory read, one core, then the docs/perf.md `ec` section.
# Usage: bench/ec/run.sh            (about 9 minutes on a 2-core machine)
# Env: CPU (core to pin, default 0), ROUNDS (default 3), REPS (per round, default 3),
#      MIN_TIME (seconds per repetition, default 0.1), NO_WRITE=1 to only print the table.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
scripts/deps.sh bench
CPU=${CPU:-0}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}
MIN_TIME=${MIN_TIME:-0.1}
POINTS=${POINTS:-"8,2 10,4 32,2 200,56"}
SIZES=${SIZES:-"4096 65536 1048576"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make -s -C bench/ec OUT="$work"
cargo bench -p kioku-ec --bench ec_bench --no-run --message-format=json-render-diagnostics \
  >"$work/build.json"
rust_bench=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "ec_bench" and m.get("executable"):
        print(m["executable"])
' "$work/build.json" | tail -1)
[ -x "$rust_bench" ] || { echo "ec_bench binary not found" >&2; exit 1; }

results="$work/results.txt"
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
  for p in $POINTS; do
    k=${p%,*} m=${p#*,}
    for s in $SIZES; do
      echo "round $round: $k+$m, $s bytes" >&2
      bm=""
      [ $((k + m)) -gt 64 ] && bm=1
      EC_BENCH_NO_BITMATRIX=$bm taskset -c "$CPU" "$work/ec_c_bench" "$k" "$m" "$s" "$MIN_TIME" "$REPS" >>"$results"
      delta=""
      [ "$round" -gt 1 ] && delta=--no-delta
      taskset -c "$CPU" "$rust_bench" --points "$k,$m" --sizes "$s" --reps "$REPS" \
        --min-time "$MIN_TIME" $delta >>"$results"
    done
  done
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
isal=$(dpkg-query -W -f='${Version}' libisal2 2>/dev/null || echo '?')
jer=$(dpkg-query -W -f='${Version}' libjerasure2 2>/dev/null || echo '?')
machine="$cpu, $(nproc) cores, $(uname -r); libisal2 $isal, libjerasure2 $jer, $(rustc --version)"
cmd="bench/ec/run.sh  (ROUNDS=$ROUNDS REPS=$REPS MIN_TIME=$MIN_TIME CPU=$CPU)"
python3 bench/ec/report.py "$results" "$cmd" "$machine" >"$work/body.md"
cat "$work/body.md"
if [ -z "${NO_WRITE:-}" ]; then
  python3 bench/perf_section.py ec <"$work/body.md"
  echo "wrote the ec section of docs/perf.md" >&2
fi
