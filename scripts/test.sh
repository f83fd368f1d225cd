#!/usr/bin/env bash
# scripts/test.sh: the whole test suite of sdp_ext, from a fresh Debian 12 machine.
#
# Installs what is missing (apt-get), builds and installs the extension and
# the tools, then runs, as the postgres OS user in a scratch copy of the tree:
#   pg_regress  sql/*.sql against expected/*.out, in a temporary instance
#               with sdp_ext preloaded (nothing else running is touched);
#   TAP         test/t/*.pl with PostgreSQL::Test::Cluster and the embedded
#               Kafka broker (tools/sdp_broker).
# The last line of output is "N passed, N failed".  Exit status 0 only if
# nothing failed.  Leaves no server or broker running.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

# The dashboard's browser test (test/t/040_dashboard.pl) needs Debian's
# chromium, a font, and Node.js with npm (it installs test/browser with npm ci).
sdp_install_packages chromium fonts-dejavu-core
command -v node >/dev/null && command -v npm >/dev/null || sdp_install_packages nodejs npm
sdp_build_install || { echo "0 passed, 1 failed"; exit 1; }

work=$(sdp_postgres_workdir)
sdp_log "running tests in $work"
start=$(date +%s)

regress_log=$work/regress.log
sdp_as_postgres make -C "$work" -s regresscheck 2>&1 | tee "$regress_log"
[ -f "$work/regression.diffs" ] && cat "$work/regression.diffs"

tap_log=$work/tap.log
sdp_as_postgres make -C "$work" -s tapcheck PROVE_FLAGS="-I test/perl --verbose --merge" 2>&1 | tee "$tap_log"

# pg_regress (PostgreSQL 15) prints one "test NAME ... ok|FAILED" line per test.
r_pass=$(grep -cE '^(test| ) *[^ ]+ +\.\.\. ok' "$regress_log")
r_fail=$(grep -cE '^(test| ) *[^ ]+ +\.\.\. FAILED' "$regress_log")
if ! grep -qE 'All [0-9]+ tests passed|tests? failed' "$regress_log"; then
  r_fail=$((r_fail + 1))  # pg_regress itself did not run to the end
fi
# TAP: one line per assertion at the top level of each test file; a file that
# died or misplanned counts once more unless it already reported a failure.
t_pass=$(grep -cE '^ok [0-9]+' "$tap_log")
t_fail=$(grep -cE '^not ok [0-9]+' "$tap_log")
broken=$(awk '/^Test Summary Report/{s=1} s && /\(Wstat: [1-9]/{n++} END{print n+0}' "$tap_log")
if ! grep -qE '^Result: (PASS|FAIL)' "$tap_log"; then broken=$((broken + 1)); fi
if [ "$t_fail" -eq 0 ] && [ "$broken" -gt 0 ]; then t_fail=$broken; fi

for d in "$work"/tmp_check/log "$work"/tmp_check_regress/log; do
  [ -d "$d" ] && [ $((r_fail + t_fail)) -gt 0 ] && { echo "--- logs in $d"; ls "$d"; }
done
echo "suite took $(( $(date +%s) - start )) s (pg_regress $r_pass passed / $r_fail failed, TAP $t_pass passed / $t_fail failed)"
echo "$((r_pass + t_pass)) passed, $((r_fail + t_fail)) failed"
[ $((r_fail + t_fail)) -eq 0 ]
