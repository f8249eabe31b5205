#!/usr/bin/env bash
# Installs the system packages kioku's build, tests, demo and benchmarks need.
# Usage: scripts/deps.sh [test|bench]   (default: test)
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
want=$(grep -hv '^\s*#' "$here/apt-packages.txt" | awk 'NF {print $1}' | sort -u)
if [ "${1:-test}" = bench ] && [ -f "$here/apt-packages-bench.txt" ]; then
  want="$want $(grep -hv '^\s*#' "$here/apt-packages-bench.txt" | awk 'NF {print $1}' | sort -u)"
fi
missing=()
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "kioku needs these Debian packages: ${missing[*]}" >&2
  echo "run:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
