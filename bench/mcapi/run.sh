#!/usr/bin/env bash
# MCAPI (kioku-mcapi) against the raw transports under it, in one run: round trips of a 24-byte
# message and a 4 KiB packet (the seed's two figures) and one-way throughput from 64 B to 1 MiB,
# over shared memory (vs. a raw SPSC ring) and over TCP on loopback (vs. a raw socket).
# Writes the `mcapi` section of docs/perf.md and docs/img/mcapi-throughput.png.
#
# Usage: bench/mcapi/run.sh [--rounds N] [--iters N] [--mib N]   (about a minute)
# Env: NO_WRITE=1 (print only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/provenance.sh
provenance crates bench include
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--rounds 5 --iters 2000 --mib 32)

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
echo "== cargo bench -p kioku-mcapi --bench mcapi -- ${args[*]}" >&2
cargo bench -q -p kioku-mcapi --bench mcapi -- "${args[@]}" >"$raw"
end=$(date -u +%s)

plot=docs/img/mcapi-throughput.png
[ -n "${NO_WRITE:-}" ] && plot=$(mktemp --suffix=.png)
body=$(python3 bench/mcapi/bench.py "$raw" "$plot")
section=$(cat <<MD
## MCAPI (kioku-mcapi): shared memory and TCP against the raw transports

Command: \`bench/mcapi/run.sh ${args[*]}\` (source $src; $(nproc) cores, Linux $(uname -r); load
average $load_start at the start, $(cut -d" " -f1-3 /proc/loadavg) at the end; $(( end - start )) s).
Two processes (node 0 and node 1) on one machine; TCP is loopback (127.0.0.1). MCAPI is the
Rust API (\`Node\`, the same core as the C API) with the default topology; "raw shm" is a pair
of single-producer single-consumer byte rings in one shared mapping, polled (spin, then
\`sched_yield\`), a 4-byte length before each buffer; "raw TCP" is a blocking socket with
TCP_NODELAY, a 4-byte length before each buffer. Round trips: the median (and 99th percentile)
of each round, then the median over rounds; raw and MCAPI alternate within every round.
Throughput: one way, packets on a channel (raw: buffers), acknowledged at the end.

$body
MD
)
if [ -z "${NO_WRITE:-}" ]; then
  printf '%s\n' "$section" | python3 bench/perf_section.py mcapi
  echo "wrote the mcapi section of docs/perf.md and $plot" >&2
fi
printf '%s\n' "$section"
