#!/usr/bin/env bash
# Checkpoint benchmark: the pi spigot and a memory-heavy compressor-like workload on plain
# anonymous memory vs on kioku regions checkpointed at 10 ms / 100 ms / 1 s / 10 s (media shm
# and file), plus checkpoint stop time vs dirty MiB (crates/ckpt/benches/stop_time.rs) beside
# memcpy and the disk's sequential write bandwidth, all in one run. Writes the `ckpt` section
# of docs/perf.md.
#
# Usage: bench/ckpt/run.sh     (about 30 minutes on a busy 2-core machine: 11 of them are pi
#                               at 30,000 digits, 4 the memheavy run at 10 ms, whose
#                               checkpoints take longer than the interval; PI30_REPS=3 saves 8)
# Env: PI_REPS (default 10), PI30_REPS (default PI_REPS), MH_REPS (default 3),
#      MH10_REPS (repetitions that include memheavy at 10 ms, default 1),
#      MH_ROUNDS (memheavy rounds per run, default 3: about 20-25 s), STOP_REPS (default 7),
#      SKIP_STOP=1 (no stop-time bench), NO_WRITE=1 (print the section only),
#      PI15_CONF / PI30_CONF / MH_CONF (kioku configurations, "medium:interval_ms ...").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
PI_REPS=${PI_REPS:-10}
PI30_REPS=${PI30_REPS:-$PI_REPS}
MH_REPS=${MH_REPS:-3}
MH_ROUNDS=${MH_ROUNDS:-3}
MH10_REPS=${MH10_REPS:-1}
STOP_REPS=${STOP_REPS:-7}
start=$(date -u +%s)
load_start=$(cut -d" " -f1-3 /proc/loadavg)

work=$(mktemp -d)
shm_dir=$(mktemp -d /dev/shm/kioku-bench.XXXXXX)
mkdir -p .kioku/bench
file_dir=$(mktemp -d "$root/.kioku/bench/ckpt.XXXXXX")
cleanup() { rm -rf "$work" "$shm_dir" "$file_dir"; }
trap cleanup EXIT

# What is measured: the commit built (read-only git queries).
src="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -n "$(git status --porcelain -- crates include examples 2>/dev/null | head -1)" ] &&
  src="$src + uncommitted changes"
echo "== build" >&2
cargo build --release -q -p kioku-capi
target_dir=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
make -s -C bench/ckpt OUT="$work" TARGET_DIR="$target_dir"
if [ -z "${SKIP_STOP:-}" ]; then
  cargo bench -q -p kioku-ckpt --bench stop_time --no-run --message-format=json-render-diagnostics \
    >"$work/build.json"
  stop_bench=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "stop_time" and m.get("executable"):
        print(m["executable"])
' "$work/build.json" | tail -1)
  [ -x "$stop_bench" ] || { echo "stop_time bench binary not found" >&2; exit 1; }
fi

# Raw results, kept after the run (gitignored) so a report can be remade from them.
results="$root/.kioku/bench/ckpt-results.txt"
: >"$results"

# Sequential write bandwidth of the disk holding the file pools: 1 GiB, 8 MiB writes, fdatasync.
disk_bw() {
  local f="$file_dir/dd.bin" out
  out=$(LC_ALL=C dd if=/dev/zero of="$f" bs=8M count=128 conv=fdatasync 2>&1 | tail -1)
  rm -f "$f"
  python3 -c '
import re, sys
m = re.search(r"copied, ([0-9.]+) s", sys.argv[1])
print("disk bytes=1073741824 seconds=%s MiBps=%.0f" % (m.group(1), 1024 / float(m.group(1))))
' "$out"
}
echo "== disk bandwidth (before)" >&2
disk_bw | tee -a "$results" >&2

# run NAME ARGS...: one run of a workload; kioku runs get a fresh pool on their medium.
n=0
run() {
  local prog=$1 mode=$2 medium=$3 interval=$4
  shift 4
  local args=(--mode "$mode")
  if [ "$mode" = kioku ]; then
    n=$((n + 1))
    local dir=$shm_dir
    [ "$medium" = file ] && dir=$file_dir
    args+=(--pool "$dir/run$n.pool" --medium "$medium" --interval-ms "$interval")
  fi
  "$work/$prog" "${args[@]}" "$@" | tee -a "$results" >&2
  rm -f "$shm_dir"/run*.pool "$file_dir"/run*.pool
}

# Configurations (medium:interval_ms). The runs of one repetition go plain first, then every
# kioku configuration, so each kioku run is compared with the plain run of its repetition.
PI15_CONF=${PI15_CONF:-"shm:10 shm:100 shm:1000 shm:10000 file:10 file:100 file:1000"}
PI30_CONF=${PI30_CONF:-"shm:10 shm:100 shm:1000 shm:10000"}
MH_CONF=${MH_CONF:-"shm:10 shm:100 shm:1000 shm:10000 file:1000 file:10000"}

echo "== pi 15000 digits x $PI_REPS" >&2
for rep in $(seq 1 "$PI_REPS"); do
  run pi_spigot plain - 0 --digits 15000
  for c in $PI15_CONF; do run pi_spigot kioku "${c%:*}" "${c#*:}" --digits 15000; done
done
echo "== memheavy x $MH_REPS" >&2
for rep in $(seq 1 "$MH_REPS"); do
  run memheavy plain - 0 --rounds "$MH_ROUNDS"
  for c in $MH_CONF; do
    # At 10 ms memheavy checkpoints back to back (each takes longer than the interval) and
    # runs ten times as long: only the first MH10_REPS repetitions include it.
    if [ "${c#*:}" = 10 ] && [ "$rep" -gt "$MH10_REPS" ]; then continue; fi
    run memheavy kioku "${c%:*}" "${c#*:}" --rounds "$MH_ROUNDS"
  done
done
stop_md="$root/.kioku/bench/ckpt-stop.md"
: >"$stop_md"
if [ -z "${SKIP_STOP:-}" ]; then
  echo "== stop time vs dirty MiB" >&2
  KIOKU_BENCH_DIR="$file_dir" "$stop_bench" --reps "$STOP_REPS" >"$stop_md"
fi

echo "== pi 30000 digits x $PI30_REPS" >&2
for rep in $(seq 1 "$PI30_REPS"); do
  run pi_spigot plain - 0 --digits 30000
  for c in $PI30_CONF; do run pi_spigot kioku "${c%:*}" "${c#*:}" --digits 30000; done
done
echo "== disk bandwidth (after)" >&2
disk_bw | tee -a "$results" >&2

python3 bench/ckpt/pi_ref.py 15000 30000 | sed 's/^/piref digits=/; s/ / fnv=/2' >>"$results"
end=$(date -u +%s)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
machine="$cpu, $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, Linux $(uname -r), $(gcc --version | head -1), $(rustc --version); kioku $src built $(date -u -d "@$start" "+%Y-%m-%d %H:%M") UTC; load average at start: $load_start, at end: $(cut -d" " -f1-3 /proc/loadavg)"
cmd="bench/ckpt/run.sh  (PI_REPS=$PI_REPS PI30_REPS=$PI30_REPS MH_REPS=$MH_REPS MH10_REPS=$MH10_REPS MH_ROUNDS=$MH_ROUNDS STOP_REPS=$STOP_REPS)"
python3 bench/ckpt/report.py "$results" "$stop_md" "$cmd" "$machine" "$(( (end - start + 30) / 60 ))" \
  >"$work/body.md"
cat "$work/body.md"
if [ -z "${NO_WRITE:-}" ]; then
  python3 bench/perf_section.py ckpt <"$work/body.md"
  echo "wrote the ckpt section of docs/perf.md" >&2
fi
