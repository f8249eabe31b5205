#!/usr/bin/env bash
# Builds the peers the process benchmarks compare against — CRIU 4.2 and DMTCP 4.2 — from their
# source trees, outside the repository, and checks each with a trivial checkpoint + restore.
#
# Usage: bench/run/peers.sh CRIU_SRC DMTCP_SRC [PREFIX]
#   CRIU_SRC   a checkout of CRIU (tag v4.2), e.g. `git clone --branch v4.2 <criu repo>`
#   DMTCP_SRC  a checkout of DMTCP (tag v4.2.0)
#   PREFIX     where to build (default /tmp/peers): PREFIX/criu, PREFIX/dmtcp; PREFIX/READY is
#              touched once both work.
# Needs root for CRIU's checks and the Debian packages in scripts/apt-packages-bench.txt.
# Afterwards the benchmarks find the peers through
#   CRIU=PREFIX/criu/sbin/criu DMTCP_LAUNCH=PREFIX/dmtcp/bin/dmtcp_launch
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,12p "$0" >&2; exit 2; }
criu_src=$(cd "$1" && pwd)
dmtcp_src=$(cd "$2" && pwd)
prefix=${3:-/tmp/peers}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
jobs=${JOBS:-2}
rm -f "$prefix/READY"

echo "== CRIU from $criu_src" >&2
# Docs (asciidoc) and the optional plugins are not needed to checkpoint a process.
make -C "$criu_src" -j"$jobs" criu >&2
make -C "$criu_src" install-criu PREFIX="$prefix/criu" >&2
criu="$prefix/criu/sbin/criu"
"$criu" --version

echo "== DMTCP from $dmtcp_src" >&2
(cd "$dmtcp_src" && ./configure --prefix="$prefix/dmtcp" >&2 && make -j"$jobs" >&2 &&
  make install >&2)
"$prefix/dmtcp/bin/dmtcp_launch" --version | head -1

echo "== trivial checkpoint + restore with each" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/count.sh" <<'SH'
#!/bin/sh
# Counts forever, writing the count to the file given; a restore must continue from it.
i=0
while :; do i=$((i + 1)); echo "$i" >"$1.new"; mv "$1.new" "$1"; sleep 0.05; done
SH
chmod +x "$work/count.sh"

# CRIU: dump a counter running as the init of its own pid namespace (so that its ids are free
# again at restore, whatever else runs here), restore it detached, see it count on.
mkdir -p "$work/criu-img"
unshare --pid --fork setsid "$work/count.sh" "$work/criu-count" </dev/null >/dev/null 2>&1 &
outer=$!
sleep 0.5
pid=$(pgrep -P "$outer" | head -1)
"$criu" dump -t "$pid" -D "$work/criu-img" -o dump.log
wait "$outer" 2>/dev/null || true
"$criu" restore -D "$work/criu-img" -d -o restore.log --pidfile "$work/criu.pid"
before=$(cat "$work/criu-count")
sleep 0.5
after=$(cat "$work/criu-count")
kill -9 "$(cat "$work/criu.pid")" 2>/dev/null || true
[ "$after" -gt "$before" ] || { echo "CRIU restore did not run on ($before -> $after)" >&2; exit 1; }
echo "CRIU: dump + restore ok ($before -> $after)" >&2

# DMTCP: launch under a private coordinator, checkpoint, kill, restart, see it count on.
port=$((7780 + RANDOM % 200))
bin="$prefix/dmtcp/bin"
img="$work/dmtcp-img"
mkdir -p "$img"
"$bin/dmtcp_coordinator" --exit-on-last -p "$port" --ckptdir "$img" </dev/null >"$work/coord1.log" 2>&1 &
sleep 0.3
"$bin/dmtcp_launch" -p "$port" --ckptdir "$img" --no-gzip "$work/count.sh" "$work/dmtcp-count" \
  </dev/null >/dev/null 2>&1 &
sleep 1
"$bin/dmtcp_command" -p "$port" --checkpoint
for _ in $(seq 100); do
  grep -q "Checkpoint complete. Wrote restart script" "$work/coord1.log" && break
  sleep 0.1
done
"$bin/dmtcp_command" -p "$port" --kill
wait
"$bin/dmtcp_coordinator" --exit-on-last -p "$port" --ckptdir "$img" </dev/null >"$work/coord2.log" 2>&1 &
sleep 0.3
"$bin/dmtcp_restart" -p "$port" "$img"/ckpt_*.dmtcp </dev/null >/dev/null 2>&1 &
sleep 1
before=$(cat "$work/dmtcp-count")
sleep 0.5
after=$(cat "$work/dmtcp-count")
"$bin/dmtcp_command" -p "$port" --kill || true
wait
[ "$after" -gt "$before" ] || { echo "DMTCP restart did not run on ($before -> $after)" >&2; exit 1; }
echo "DMTCP: checkpoint + restart ok ($before -> $after)" >&2

touch "$prefix/READY"
echo "peers ready: CRIU=$criu DMTCP_LAUNCH=$bin/dmtcp_launch" >&2
