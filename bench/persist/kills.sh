#!/usr/bin/env bash
# The thesis's validation at its own scale: the prime generator and the string generator of
# java/persist, SIGKILLed at random moments and restarted on the same pool, KILLS times each
# (default 15000, so 30,000 in all), every restart checking the state it recovered.
# Hours on two cores (about one JVM start per kill); not part of `make bench`.
# Usage: bench/persist/kills.sh [KILLS_PER_PROGRAM]     (KIOKU_SEED=... replays a run)
set -euo pipefail
cd "$(dirname "$0")/../../java"
kills="${1:-15000}"
mvn -B -q -ntp install -pl persist -DskipTests
mvn -B -ntp verify -pl persist -Dtest=NONE -Dsurefire.failIfNoSpecifiedTests=false \
  -Dit.test=KillIT -Dfailsafe.failIfNoSpecifiedTests=false -Dkioku.kills="$kills" \
  | grep -E "KillIT seed|primes:|Tests run:|BUILD|ERROR"
