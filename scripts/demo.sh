#!/usr/bin/env bash
# `make demo`: kioku's main job end to end. An ordinary program (the pi spigot, built here
# from examples/proc/pi.c, no kioku library in it) runs under `kioku run` and is checkpointed
# every 10 ms into a pool under ./.kioku/; it is killed with SIGKILL part-way; `kioku restore`
# brings it back from its last checkpoint and it finishes. Its output must equal an
# uninterrupted run's, byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."

DIGITS=${DIGITS:-20000}
KILL_AFTER=${KILL_AFTER:-1.5}
CC=${CC:-cc}
work=target/demo
mkdir -p "$work" .kioku
kioku=target/release/kioku

echo "== building kioku and the pi spigot (examples/proc/pi.c)"
cargo build --release -q -p kioku-cli
"$CC" -O2 -o "$work/pi" examples/proc/pi.c

echo "== an uninterrupted run: pi $DIGITS"
start=$(date +%s%N)
"$work/pi" "$DIGITS" > "$work/expected.txt"
plain_ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '   %d ms, last line: %s\n' "$plain_ms" "$(tail -1 "$work/expected.txt")"

pool=.kioku/pi-demo.pool
rm -f "$pool"
echo "== kioku run --interval 10ms -- pi $DIGITS   (pool $pool), SIGKILL after ${KILL_AFTER} s"
"$kioku" run --pool "$pool" --interval 10ms --summary -- "$work/pi" "$DIGITS" > "$work/output.txt" &
monitor=$!
sleep "$KILL_AFTER"
# The monitor's child is the init of the program's pid namespace; the program is its child.
child=$(cat "/proc/$monitor/task/$monitor/children" 2>/dev/null | awk '{print $1}')
program=""
if [ -n "$child" ]; then
    program=$(cat "/proc/$child/task/$child/children" 2>/dev/null | awk '{print $1}')
    program=${program:-$child}
fi
if [ -z "$program" ]; then
    echo "the program finished before the kill; raise DIGITS or lower KILL_AFTER" >&2
    exit 1
fi
kill -KILL "$program"
wait "$monitor" 2>/dev/null || true
printf '   killed pid %s; it had printed %s of %s lines\n' "$program" \
    "$(wc -l < "$work/output.txt")" "$(wc -l < "$work/expected.txt")"

echo "== kioku inspect --pool $pool"
"$kioku" inspect --pool "$pool" | sed 's/^/   /' | head -12

echo "== kioku restore --pool $pool"
"$kioku" restore --pool "$pool" --interval 10ms --summary

echo "== comparing with the uninterrupted run"
if cmp -s "$work/expected.txt" "$work/output.txt"; then
    echo "   identical: $(wc -c < "$work/output.txt") bytes, $(tail -1 "$work/output.txt")"
else
    echo "   DIFFERENT: see $work/expected.txt and $work/output.txt" >&2
    exit 1
fi
