# Sourced by the benchmarks of bench/run/ (`. "$(dirname "$0")/common.sh" PATH...`): runs from
# the repository's root ($root), records what is measured (bench/provenance.sh: $src,
# $load_start, $start, from PATH...), and makes the scratch directories, removed on exit:
# $work (built programs), $shm (pools on /dev/shm), and with BENCH_DISK_DIR=NAME set before
# sourcing, $disk (pools on the repository's disk, under .kioku/bench/NAME.*).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/provenance.sh
provenance "$@"

work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/kioku-bench.XXXXXX)
disk=
if [ -n "${BENCH_DISK_DIR:-}" ]; then
  mkdir -p .kioku/bench
  disk=$(mktemp -d "$root/.kioku/bench/$BENCH_DISK_DIR.XXXXXX")
fi
trap 'rm -rf "$work" "$shm" ${disk:+"$disk"}' EXIT

# write_section NAME: the section on stdin into docs/perf.md as section NAME
# (bench/perf_section.py), or printed only with NO_WRITE=1.
write_section() {
  if [ -n "${NO_WRITE:-}" ]; then
    cat
  else
    python3 bench/perf_section.py "$1"
    echo "docs/perf.md: section $1 updated" >&2
  fi
}
