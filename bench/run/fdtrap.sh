#!/usr/bin/env bash
# What kioku's descriptor traps cost a program (issue 18, docs/run.md "The stop path"): a loop
# of open/close (bench/run/openloop.c: neither is trapped), a loop of dup/close (dup is trapped:
# one trap a round) and sqlite3 inserting rows in one transaction each (open/close of its
# journal, fcntl locks: trapped) — plain, under BASE_KIOKU (before the descriptor traps) and
# under this tree's kioku (--interval 1s, pool on /dev/shm), interleaved run by run; medians of
# REPS (3). Prints Markdown.
#
# Usage: BASE_KIOKU=/path/to/old/kioku [KIOKU=...] bench/run/fdtrap.sh
# Env: REPS (3), N (200000 rounds), ROWS (2000), PROGS ("openloop duploop sql").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
shm=$(mktemp -d /dev/shm/kioku-fdtrap.XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
KIOKU=${KIOKU:-$root/target/release/kioku}
REPS=${REPS:-3}
N=${N:-200000}
ROWS=${ROWS:-2000}
PROGS=${PROGS:-openloop duploop sql}
"${CC:-cc}" -O2 -o "$work/openloop" "$root/bench/run/openloop.c"
command -v sqlite3 >/dev/null || { echo "sqlite3 is missing: apt-get install sqlite3" >&2; exit 1; }
cat > "$work/sql.sh" <<SQL
#!/bin/sh
rm -f "$work/db"
{ echo "create table t(a integer, b text);"
  i=0; while [ \$i -lt $ROWS ]; do echo "insert into t values(\$i, 'row \$i');"; i=\$((i+1)); done
} | sqlite3 "$work/db"
SQL
chmod +x "$work/sql.sh"
declare -A T
run() { # name cmd...
  local name=$1; shift
  local s e
  s=$(date +%s.%N)
  "$@" >/dev/null
  e=$(date +%s.%N)
  T[$name]+="$(echo "$e - $s" | bc) "
}
under() { local k=$1; shift; rm -f "$shm/p.pool"; "$k" run --pool "$shm/p.pool" --medium shm --interval 1s -- "$@"; }
for r in $(seq "$REPS"); do
  for prog in $PROGS; do
    case $prog in
      openloop) cmd=("$work/openloop" "$N");;
      duploop) cmd=("$work/openloop" "$N" dup);;
      sql) cmd=("$work/sql.sh");;
    esac
    run "$prog plain" "${cmd[@]}"
    [ -n "${BASE_KIOKU:-}" ] && run "$prog base" under "$BASE_KIOKU" "${cmd[@]}"
    run "$prog this" under "$KIOKU" "${cmd[@]}"
  done
done
med() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
echo "| program | plain s | base s | this s | (this − base) per round |"
echo "|---|---|---|---|---|"
for prog in $PROGS; do
  p=$(echo "${T[$prog plain]}" | med); t=$(echo "${T[$prog this]}" | med)
  b=$( [ -n "${BASE_KIOKU:-}" ] && echo "${T[$prog base]}" | med || echo "-")
  calls=$([ $prog != sql ] && echo "$N" || echo "")
  per=$([ -n "$calls" ] && [ "$b" != "-" ] && echo "scale=2; ($t - $b) * 1000000 / $calls" | bc | sed 's/$/ µs/' || echo "–")
  echo "| $prog | $p | $b | $t | $per |"
done
