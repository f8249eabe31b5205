#!/usr/bin/env bash
# The file journal's costs: per trapped call (pwrite of 4 KiB over existing data, appends, a
# write to a pipe at a descriptor >= 3) with and without the filter, with the journal's pool on
# shm and on file media; and sqlite3 inserting rows in transactions with and without it.
# Prints a table with the ratios (crates/run/benches/journal.rs).
#
# Usage: bench/run/journal.sh     (about a minute)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
command -v sqlite3 >/dev/null || echo "sqlite3 is missing (apt-get install sqlite3): its rows are skipped" >&2
cargo bench -q -p kioku-run --bench journal
