#!/usr/bin/env bash
# kioku-persist (persistence by reachability, a -javaagent): overhead of the agent on whole
# workloads (the project's own and Jackson, Guava, commons-math, commons-compress, XZ), reads and
# stores of persistent objects per medium, make_persistent throughput with 1 and 2 threads,
# recovery time per GB with peak RSS (small objects and arrays), and JVM start-up — every figure
# against a baseline measured in the same run
# (bench/persist/bench.py). Writes the `persist` section of docs/perf.md.
#
# Usage: bench/persist/run.sh      (about 25 minutes on a 2-core machine)
# Env: ROUNDS (overhead: interleaved forks per configuration, default 2), WI and MI (overhead:
#      warmup iterations of 1 s, measurement iterations of 0.5 s; defaults 5 and 5), SWI and SMI
#      (reads, writes, make_persistent: warmup iterations of 0.5 s, measurement iterations of
#      0.4 s; defaults 3 and 5), RROUNDS (reads: rounds of one fork per benchmark, default 3),
#      FORKS (make_persistent: forks per benchmark, default 2), WFORKS (writes: forks per
#      benchmark and medium, default 1), REC_GB (recovery: GB of replicas, default 1.0), REC_REPS
#      (recoveries per heap, default 5), START_RUNS (start-up: rounds, default 20), PROFILE=0 (no JFR profile of the "persistence active" case), ONLY
#      (comma-separated subset of startup,overhead,reads,writes,make_persistent,recovery), NO_WRITE=1
#      (print the section only), KIOKU_PERSIST_JAR (an agent jar to use instead of building
#      java/persist; give a path relative to the repository).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/provenance.sh
provenance java/persist bench/persist
here=bench/persist
given_jar=${KIOKU_PERSIST_JAR:-}
mkdir -p "$here/target"

echo "== build" >&2
if [ -z "${KIOKU_PERSIST_JAR:-}" ]; then
  (cd java && mvn -q -B package -pl persist -DskipTests)
  KIOKU_PERSIST_JAR=java/persist/target/kioku-persist.jar
fi
# A private copy of the agent: a rebuild of java/ during the run does not change what is measured.
agent="$root/$here/target/kioku-persist.jar"
[ "$(realpath "$KIOKU_PERSIST_JAR")" = "$agent" ] || cp -p "$KIOKU_PERSIST_JAR" "$agent"
(cd "$here" && mvn -q -B package -DskipTests -Dkioku.persist.jar="$agent")

shm=$(mktemp -d /dev/shm/kioku-bench-persist.XXXXXX)
disk="$root/$here/target/pools"
out="$root/$here/target/results"
rm -rf "$disk" "$out"
mkdir -p "$disk" "$out"
trap 'rm -rf "$shm" "$disk"' EXIT
disk_fs=$(stat -f -c %T "$disk")
if [ "$disk_fs" = tmpfs ]; then
  echo "$disk is on tmpfs: the file medium needs a disk filesystem" >&2
  exit 1
fi

body=$(BENCH_JAR="$root/$here/target/benchmarks.jar" BENCH_AGENT="$agent" BENCH_SHM="$shm" \
  BENCH_DISK="$disk" BENCH_DISK_FS="$disk_fs" BENCH_OUT="$out" python3 "$here/bench.py")
end=$(date -u +%s)
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
jvm=$(java -version 2>&1 | sed -n 2p)
jar_id="$(sha256sum "$agent" | cut -c1-12), built $(date -u -r "$agent" '+%Y-%m-%d %H:%M UTC')"
section=$(cat <<MD
## Java persistence by reachability (kioku-persist)

Command: \`${given_jar:+KIOKU_PERSIST_JAR=$given_jar }bench/persist/run.sh\` (ROUNDS=${ROUNDS:-2} WI=${WI:-5} MI=${MI:-5} SWI=${SWI:-3} SMI=${SMI:-5} RROUNDS=${RROUNDS:-3} FORKS=${FORKS:-2} WFORKS=${WFORKS:-1} REC_GB=${REC_GB:-1.0} REC_REPS=${REC_REPS:-5} START_RUNS=${START_RUNS:-20}; JMH 1.37 in \`bench/persist/\`; source $src; agent jar sha256 $jar_id; $(( (end - start) / 60 )) minutes; $(date -u +%Y-%m-%d)).
Machine: $cpu, $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, Linux $(uname -r), $jvm; load average $load_start at the start, $(cut -d" " -f1-3 /proc/loadavg) at the end.

Other builds and tests were running on this machine during the run, so absolute times are noisy:
read the ratios, each taken between figures measured in the same run (and, for the overhead,
in interleaved forks). *mean ± error* is JMH's: the half-width of the 99.9 % confidence
interval over all measurement iterations of all forks; a ratio's error combines both relative
errors. Benchmark JVMs: \`-Xms2g -Xmx2g\`, G1.

$body
MD
)
if [ -n "${NO_WRITE:-}" ]; then
  echo "$section"
else
  echo "$section" | python3 bench/perf_section.py persist
  echo "docs/perf.md: section persist updated" >&2
fi
