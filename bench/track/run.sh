#!/usr/bin/env bash
# Runs the kioku-track benchmark in release mode and writes its table into docs/perf.md
# (section "track"). Usage: bench/track/run.sh [track-bench args...]   (about one minute)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
cargo build --release -q -p kioku-track --bin track-bench
bin="${CARGO_TARGET_DIR:-$root/target}/release/track-bench"
args=("$@")
body="$(mktemp)"
trap 'rm -f "$body"' EXIT
{
  echo "## Page tracker (kioku-track)"
  echo
  echo "Command: \`bench/track/run.sh ${args[*]:-}\` (runs \`cargo build --release -p kioku-track --bin track-bench\` then \`track-bench ${args[*]:-}\`)."
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r), THP \`$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled)\`; load average $(cut -d' ' -f1-3 /proc/loadavg) at start; $(date -u +%Y-%m-%d)."
  echo
  "$bin" "${args[@]}"
} >"$body"
cat "$body"
python3 bench/perf_section.py track <"$body"
