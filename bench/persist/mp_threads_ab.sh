#!/usr/bin/env bash
# make_persistent with 1 and 2 threads at once, agent A (before) against agent B (after), in
# one run (ConcurrentPersistMain): ROUNDS rounds, each running every agent, shape (disjoint
# graphs, or graphs sharing half their objects) and thread count in its own JVM, the agents'
# order alternating from round to round. Prints RESULT lines and the load average at the start
# and the end; bench/persist/mp_threads_ab.py turns them into the table of docs/perf.md.
#
# usage: bench/persist/mp_threads_ab.sh A.jar B.jar [ROUNDS (5)] [N objects per graph (20000)]
#        [WARMUP rounds (10)] [MEASURED rounds (30)]
# The benchmarks jar must be built first (bench/persist/run.sh, or mvn package in bench/persist).
set -euo pipefail
a=$(realpath "$1")
b=$(realpath "$2")
rounds=${3:-5}
n=${4:-20000}
warmup=${5:-10}
measured=${6:-30}
here=$(cd "$(dirname "$0")" && pwd)
jar="$here/target/benchmarks.jar"
shm=$(mktemp -d /dev/shm/kioku-mp-ab.XXXXXX)
trap 'rm -rf "$shm"' EXIT
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u '+%Y-%m-%d %H:%M') UTC)"
for i in $(seq 1 "$rounds"); do
  order="A B"
  [ $((i % 2)) = 0 ] && order="B A"
  for shape in disjoint shared; do
    for t in 1 2; do
      for x in $order; do
        agent=$a
        [ "$x" = B ] && agent=$b
        line=$(java -Xmx2g -XX:-PrintWarnings -javaagent:"$agent" -cp "$jar" \
          kioku.bench.persist.ConcurrentPersistMain "$shm/mp.pool" "$t" "$shape" "$n" "$warmup" "$measured" \
          | grep '^RESULT')
        echo "agent=$x round=$i load=$(cut -d' ' -f1 /proc/loadavg) $line"
      done
    done
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u '+%Y-%m-%d %H:%M') UTC)"
