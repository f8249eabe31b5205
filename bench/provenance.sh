# Sourced by the benchmark scripts, from the repository's root: what a result was measured on.
# `provenance PATH...` sets start (seconds since the epoch), load_start (the load averages now)
# and src (the commit, with "+ uncommitted changes" when PATH... differ from it).
provenance() {
  start=$(date -u +%s)
  load_start=$(cut -d" " -f1-3 /proc/loadavg)
  src="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [ -n "$(git status --porcelain -- "$@" 2>/dev/null | head -1)" ]; then
    src="$src + uncommitted changes"
  fi
}
