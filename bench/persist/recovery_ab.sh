#!/usr/bin/env bash
# Recovery and make_persistent of about GB gigabytes of small objects (RecoveryMain's "objects"
# shape: linked lists of 8,192 Items), agent A (before) against agent B (after), in one run:
# each agent builds a heap by make_persistent into its own pool (so two agents whose heap
# layouts differ can be compared), then REPS rounds of a recovery of its own pool by each
# agent, in alternating order, and a build of the same graph with `new`
# without the agent. Prints RESULT lines (wall seconds, process CPU seconds, peak RSS) and the
# load average at the start and the end; CPU seconds are what a loaded machine stretches least.
#
# usage: bench/persist/recovery_ab.sh A.jar B.jar [GB (1.0)] [REPS (3)] [SHAPE (objects)]
# SHAPE: RecoveryMain's objects, arrays, mixed or shuffled (objects relinked in random order).
# The benchmarks jar must be built first (bench/persist/run.sh, or mvn package in bench/persist).
set -euo pipefail
a=$(realpath "$1")
b=$(realpath "$2")
gb=${3:-1.0}
reps=${4:-3}
shape=${5:-objects}
here=$(cd "$(dirname "$0")" && pwd)
jar="$here/target/benchmarks.jar"
shm=$(mktemp -d /dev/shm/kioku-recovery-ab.XXXXXX)
trap 'rm -rf "$shm"' EXIT
pool_a="$shm/a.pool"
pool_b="$shm/b.pool"
run() {
  local agent=$1
  shift
  java -Xmx8g -XX:-PrintWarnings ${agent:+-javaagent:$agent} -cp "$jar" \
    kioku.bench.persist.RecoveryMain "$@" | grep '^RESULT'
}
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u '+%Y-%m-%d %H:%M') UTC)"
bytes=$(python3 -c "print(int($gb * 1e9))")
echo "build B: $(run "$b" build "$pool_b" "$shape" "$bytes")"
built=$(run "$a" build "$pool_a" "$shape" "$bytes")
echo "build A: $built"
chunks=$(echo "$built" | grep -o 'chunks=[0-9]*' | cut -d= -f2)
for i in $(seq 1 "$reps"); do
  order="A B"
  [ $((i % 2)) = 0 ] && order="B A"
  for x in $order; do
    agent=$a
    pool=$pool_a
    if [ "$x" = B ]; then
      agent=$b
      pool=$pool_b
    fi
    echo "recover $x: $(run "$agent" recover "$pool" "$shape")"
  done
  echo "new: $(run "" plain "$shape" "$chunks")"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u '+%H:%M') UTC)"
