#!/usr/bin/env bash
# Runs every benchmark; each rewrites its own section of docs/perf.md.
set -euo pipefail
cd "$(dirname "$0")/.."
for b in bench/*/run.sh; do
  echo "== $b" >&2
  "$b"
done
