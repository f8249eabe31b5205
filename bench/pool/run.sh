#!/usr/bin/env bash
# Commit latency per medium; rewrites the "pool" section of docs/perf.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmd="cargo bench -q -p kioku-pool --bench commit"
table=$($cmd)
{
  echo "## Pool: commit latency per medium"
  echo
  echo "A durable update = write the bytes into a section, flush them, commit (two fences,"
  echo "the first covering the data too). Baselines in the same run: memcpy of the same bytes, and"
  echo "pwrite + fdatasync of the same bytes to a plain file on the same disk."
  echo
  echo "Command: \`bench/pool/run.sh\` (runs \`$cmd\`), $(date -u +%Y-%m-%d), $(nproc) cores, kernel $(uname -r)."
  echo
  echo "$table"
} | python3 bench/perf_section.py pool
echo "$table"
