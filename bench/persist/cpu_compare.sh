#!/usr/bin/env bash
# Two kioku-persist agent jars on the Workloads, persistence active, by the benchmark thread's
# CPU time (CpuDriver): for a machine too loaded for JMH's wall-clock figures. ROUNDS rounds of
# three JVMs (no agent, A, B; the order reversed every other round), each running every
# workload (SECS seconds each: half warm-up). Prints one line per JVM and workload ("config
# round workload median_ms min_ms count"), then a Markdown table: medians over rounds of each
# JVM's median, in brackets the lowest operation, overheads against no agent, B ÷ A per round.
# Usage (after `cd bench/persist && mvn -q package`): bench/persist/cpu_compare.sh A.jar B.jar
# Env: ROUNDS (2), SECS (12), WORKLOADS (all eleven).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
a=$(realpath "$1"); b=$(realpath "$2")
rounds=${ROUNDS:-2}
workloads=${WORKLOADS:-"hashMap treeMap arrayList mergeSort nbody jsonParse jsonWrite bzip2 xz guava commonsMath"}
work=$(mktemp -d); shm=$(mktemp -d /dev/shm/kioku-cpu.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
echo "# load $(cut -d' ' -f1-3 /proc/loadavg) at the start" >&2
lines="$work/lines"
for r in $(seq 1 "$rounds"); do
  configs="none A B"; [ $((r % 2)) = 0 ] && configs="B A none"
  for c in $configs; do
    case $c in
      none) agent=() ;;
      A) agent=("-javaagent:$a=instrument.cache=$work/cache-A" -Dkioku.bench.mode=active) ;;
      B) agent=("-javaagent:$b=instrument.cache=$work/cache-B" -Dkioku.bench.mode=active) ;;
    esac
    # shellcheck disable=SC2086
    java -Xms2g -Xmx2g ${agent[@]+"${agent[@]}"} -Dkioku.bench.shm="$shm" -Dsecs="${SECS:-12}" \
      -cp "$here/target/benchmarks.jar" kioku.bench.persist.CpuDriver $workloads 2>/dev/null \
      | grep -v '^KIOKU' | sed "s/^/$c $r /" | tee -a "$lines"
  done
done
echo "# load $(cut -d' ' -f1-3 /proc/loadavg) at the end" >&2
python3 - "$lines" <<'PY'
import collections, math, statistics, sys
rows, order = collections.defaultdict(lambda: collections.defaultdict(list)), []
for line in open(sys.argv[1]):
    c, r, w, med, mn, _ = line.split()
    order += [w] if w not in order else []
    rows[w][c].append((int(r), float(med), float(mn)))
print("| workload | no agent, ms of CPU: median (min) | A | B | A vs none | B vs none | B ÷ A (per round) |")
print("|---|---:|---:|---:|---:|---:|---:|")
ga, gb, gba = [], [], []
for w in order:
    d = rows[w]
    m = {c: statistics.median(x[1] for x in d[c]) for c in d}
    lo = {c: min(x[2] for x in d[c]) for c in d}
    per = [dict((x[0], x[1]) for x in d["B"])[r] / dict((x[0], x[1]) for x in d["A"])[r]
           for r in sorted({x[0] for x in d["B"]})]
    ga.append(m["A"] / m["none"]); gb.append(m["B"] / m["none"]); gba.append(m["B"] / m["A"])
    print(f"| `{w}` | {m['none']:.2f} ({lo['none']:.2f}) | {m['A']:.2f} ({lo['A']:.2f}) | "
          f"{m['B']:.2f} ({lo['B']:.2f}) | {100 * (ga[-1] - 1):+.0f} % | {100 * (gb[-1] - 1):+.0f} % | "
          f"{gba[-1]:.2f} ({', '.join(f'{x:.2f}' for x in per)}) |")
g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
print(f"| **geometric mean** | | | | **{100 * (g(ga) - 1):+.0f} %** | **{100 * (g(gb) - 1):+.0f} %** | **{g(gba):.2f}** |")
PY
