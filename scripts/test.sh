#!/usr/bin/env bash
# scripts/test.sh: the whole test suite of sdp_ext, from a fresh Debian 12 machine.
#
# Installs what is missing (apt-get), builds the tools, then runs the suite
# in passes, each with the extension built against and installed into:
#   packaged   Debian's PostgreSQL 15 (the server users run), against the
#              embedded broker (tools/sdp_broker, librdkafka's mock cluster);
#   pg17, pg18 PostgreSQL 17 (Debian trixie's source package) and 18 (sid's),
#              assert-enabled as cassert's 15 (scripts/cassert.sh 17|18), with
#              the embedded broker; test/t/083_pg_upgrade.pl runs pg_upgrade
#              from cassert's 15 (SDP_UPGRADE_FROM, built if missing) to them;
#   cassert    PostgreSQL 15 from Debian's source package built with
#              --enable-cassert --enable-debug (scripts/cassert.sh; built once
#              per machine and cached), where freed memory is overwritten and
#              assertions are checked; the embedded broker;
#   kafka      Debian's PostgreSQL 15 again, against Apache Kafka itself
#              (scripts/kafka.sh: a KRaft broker per test file, fetched from
#              Maven Central once per machine), with the extension and the
#              tools built against a current librdkafka (scripts/librdkafka.sh,
#              from Debian's source package: Debian 12's 2.0.2 cannot
#              authenticate with SCRAM to Kafka 4).  A test that needs the
#              embedded broker's fault injection says so and is skipped; the
#              tests of Apache Kafka's semantics (test/t/1*) run here only.
# Each pass runs, as the postgres OS user in a scratch copy of the tree:
#   pg_regress  test/sql/*.sql against test/expected/*.out, in a temporary instance
#               with sdp_ext preloaded (nothing else running is touched);
#   TAP         test/t/*.pl with PostgreSQL::Test::Cluster and the broker.
#
#   SDP_SERVERS="packaged"   run these passes only (default: "cassert pg18 kafka", as
#                            CI; "packaged pg17" are left out for time: README,
#                            PostgreSQL versions)
#   SDP_TESTS="test/t/010_append_exactly_once.pl"   only these TAP files
#   SDP_REGRESS=0            skip pg_regress
#   SDP_TEST_JOBS=2          TAP files run at once (prove -j; default 2: each
#                            file has its own servers, broker and ports)
#
# The last line of output is "N passed, N failed".  Exit status 0 only if
# nothing failed.  Leaves no server or broker running.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

servers=${SDP_SERVERS:-cassert pg18 kafka}

# The dashboard's browser test (test/t/040_dashboard.pl) needs Debian's
# chromium, a font, and Node.js with npm (it installs test/browser with npm ci);
# test/t/074_processor_plpython.pl PL/Python for the packaged server (the
# kafka pass's; the assert-enabled servers have none, and it skips there).
sdp_install_packages chromium fonts-dejavu-core "postgresql-plpython3-$SDP_PG_VERSION"
# test/t/006_fuzz.pl (scripts/fuzz.sh, as postgres): clang and libFuzzer
sdp_install_packages clang libclang-rt-14-dev
command -v node >/dev/null && command -v npm >/dev/null || sdp_install_packages nodejs npm
sdp_build_tools || { echo "0 passed, 1 failed"; exit 1; }

total_pass=0
total_fail=0
summary=()

# test/t/049_avro.pl: a schema registry (Apicurio Registry, from Maven Central,
# with a Java 21 from PyPI where Debian's is older) and Confluent's Python
# client with its Avro serializer (PyPI), fetched once per machine
command -v java >/dev/null || sdp_install_packages openjdk-17-jre-headless
command -v mvn >/dev/null || sdp_install_packages maven
if ! sdp_as_root bash scripts/registry.sh fetch >/dev/null || ! sdp_as_root bash scripts/pyavro.sh >/dev/null; then
  summary+=("the schema registry or the Avro producer could not be fetched (test 049 skips)")
  total_fail=$((total_fail + 1))
fi

# extract_prev_version WORK: the previous release's tree in WORK/prev_version,
# for test/t/082_upgrade_binary.pl: the parent of the newest commit that set
# sdp_ext.control's default_version to the current one.  Without the history
# (no .git, shallow clone) it says why and leaves it absent (the test skips).
extract_prev_version() {
  local work=$1 cur c prev='' git=(git -c safe.directory='*')
  control_version() { "${git[@]}" show "$1:sdp_ext.control" 2>/dev/null | sed -n "s/^default_version *= *'\(.*\)'.*/\1/p"; }
  if ! command -v git >/dev/null || ! "${git[@]}" rev-parse --git-dir >/dev/null 2>&1; then
    sdp_log "no git repository here: no previous version for test 082"; return 0
  fi
  if [ "$("${git[@]}" rev-parse --is-shallow-repository)" = true ]; then
    sdp_log "shallow clone: no previous version for test 082 (fetch the history: git fetch --unshallow)"; return 0
  fi
  cur=$(sed -n "s/^default_version *= *'\(.*\)'.*/\1/p" sdp_ext.control)
  for c in $("${git[@]}" rev-list HEAD -- sdp_ext.control); do
    if [ "$(control_version "$c")" = "$cur" ] && [ -n "$(control_version "$c^")" ] && [ "$(control_version "$c^")" != "$cur" ]; then
      prev=$c^; break
    fi
  done
  if [ -z "$prev" ]; then
    sdp_log "no commit in the history sets default_version to '$cur': no previous version for test 082"; return 0
  fi
  mkdir -p "$work/prev_version"
  if ! "${git[@]}" archive "$prev" | tar -x -C "$work/prev_version"; then
    sdp_log "git archive $prev failed: no previous version for test 082"; rm -rf "$work/prev_version"; return 0
  fi
  sdp_log "previous version $(control_version "$prev") ($("${git[@]}" rev-parse --short "$prev")) in $work/prev_version"
}

# run_suite LABEL PG_BINDIR [RDKAFKA_PREFIX KAFKA]: build and install sdp_ext
# for that server (against the librdkafka in RDKAFKA_PREFIX, tools included,
# when given), run the suite (against the broker KAFKA: embedded or apache).
run_suite() {
  local label=$1 bin=$2 rdkafka=${3:-} kafka=${4:-embedded} work start r_pass=0 r_fail=0 t_pass t_fail broken
  local rdk=()
  work=$(sdp_postgres_workdir)
  sdp_log "[$label] building sdp_ext against $bin/pg_config${rdkafka:+ and librdkafka in $rdkafka}, tests in $work (broker: $kafka)"
  [ -n "$rdkafka" ] && rdk=(RDKAFKA_PREFIX="$rdkafka")
  if ! sdp_build_install_ext "$work" "$bin/pg_config" "${rdk[@]}" ||
     { [ -n "$rdkafka" ] && ! sdp_as_root make -s -B -C "$work" -j2 CI="${CI:-}" "${rdk[@]}" tools >/dev/null; }; then
    summary+=("$label: build failed")
    total_fail=$((total_fail + 1))
    return
  fi
  extract_prev_version "$work"
  sdp_as_root chown -R postgres:postgres "$work"
  start=$(date +%s)

  local regress_log=$work/regress.log tap_log=$work/tap.log
  if [ "${SDP_REGRESS:-1}" != 0 ]; then
    sdp_as_postgres make -C "$work" -s regresscheck PG_CONFIG="$bin/pg_config" 2>&1 | tee "$regress_log"
    [ -f "$work/regression.diffs" ] && cat "$work/regression.diffs"
    # pg_regress prints a line per test: "test NAME ... ok|FAILED" (15), "ok|not ok N - NAME" (16 on)
    r_pass=$(grep -cE '^(test| ) *[^ ]+ +\.\.\. ok|^ok [0-9]+ ' "$regress_log")
    r_fail=$(grep -cE '^(test| ) *[^ ]+ +\.\.\. FAILED|^not ok [0-9]+ ' "$regress_log")
    if ! grep -qE 'All [0-9]+ tests passed|tests? failed' "$regress_log"; then
      r_fail=$((r_fail + 1))  # pg_regress itself did not run to the end
    fi
  fi

  local prove_tests=()
  [ -n "${SDP_TESTS:-}" ] && prove_tests=(PROVE_TESTS="$SDP_TESTS")
  # the tests' temporary files (brokers' directories among them) in the pass's own directory
  sdp_as_postgres mkdir -p "$work/tmp"
  sdp_as_postgres env SDP_KAFKA="$kafka" SDP_UPGRADE_FROM="${SDP_UPGRADE_FROM:-}" TMPDIR="$work/tmp" make -C "$work" -s tapcheck PG_CONFIG="$bin/pg_config" "${prove_tests[@]}" \
      PROVE_FLAGS="-j${SDP_TEST_JOBS:-2} -I test/perl --verbose --merge" 2>&1 | tee "$tap_log"
  local tap_rc=${PIPESTATUS[0]}
  # a test killed outright leaves its Apache Kafka broker (its own session) behind: this pass's only
  [ "$kafka" = apache ] && pkill -u postgres -f "kafka\.Kafka $work/tmp/" 2>/dev/null
  # TAP: one line per assertion at the top level of each test file; a file that
  # died or misplanned counts once more unless it already reported a failure
  # (prove says NOTESTS when every file skipped).
  t_pass=$(grep -cE '^ok [0-9]+' "$tap_log")
  t_fail=$(grep -cE '^not ok [0-9]+' "$tap_log")
  broken=$(awk '/^Test Summary Report/{s=1} s && /\(Wstat: [1-9]/{n++} END{print n+0}' "$tap_log")
  if ! grep -qE '^Result: (PASS|FAIL|NOTESTS)' "$tap_log"; then broken=$((broken + 1)); fi
  if [ "$t_fail" -eq 0 ] && [ "$broken" -gt 0 ]; then t_fail=$broken; fi
  # A bail-out (e.g. a server that went down under a test: pg_ctl stop
  # fails) stops prove, which still says PASS for the files it ran: each
  # file it never started counts as a failure, and a failed make once more.
  local planned ran
  # shellcheck disable=SC2086 # SDP_TESTS is a list of files or patterns
  planned=$(cd "$work" && ls -d ${SDP_TESTS:-test/t/*.pl} 2>/dev/null | wc -l)
  ran=$(grep -oE '^test/t/[^ ]+\.pl \.\.' "$tap_log" | sort -u | wc -l)
  if [ "$ran" -lt "$planned" ]; then
    echo "[$label] $((planned - ran)) of $planned test files did not run"
    t_fail=$((t_fail + planned - ran))
  fi
  if [ "$tap_rc" -ne 0 ] && [ "$t_fail" -eq 0 ]; then
    echo "[$label] make tapcheck failed (status $tap_rc)"
    t_fail=1
  fi

  for d in "$work"/tmp_check/log "$work"/tmp_check_regress/log; do
    [ -d "$d" ] && [ $((r_fail + t_fail)) -gt 0 ] && { echo "--- [$label] logs in $d"; ls "$d"; }
  done
  summary+=("$label: took $(( $(date +%s) - start )) s (pg_regress $r_pass passed / $r_fail failed, TAP $t_pass passed / $t_fail failed)")
  total_pass=$((total_pass + r_pass + t_pass))
  total_fail=$((total_fail + r_fail + t_fail))
}

for s in $servers; do
  case $s in
    packaged) run_suite packaged "$SDP_PG_BIN" ;;
    cassert)
      if prefix=$(bash scripts/cassert.sh); then
        run_suite cassert "$prefix/bin"
      else
        summary+=("cassert: the assert-enabled server could not be built")
        total_fail=$((total_fail + 1))
      fi ;;
    pg17|pg18)
      # the 15 to upgrade from (test/t/083_pg_upgrade.pl), then the server itself
      if ! from=$(bash scripts/cassert.sh 15) || ! prefix=$(bash scripts/cassert.sh "${s#pg}"); then
        summary+=("$s: an assert-enabled server could not be built")
        total_fail=$((total_fail + 1))
      else
        SDP_UPGRADE_FROM=$from run_suite "$s" "$prefix/bin"
      fi ;;
    kafka)
      command -v java >/dev/null || sdp_install_packages openjdk-17-jre-headless
      command -v mvn >/dev/null || sdp_install_packages maven
      if ! sdp_as_root bash scripts/kafka.sh fetch >/dev/null; then
        summary+=("kafka: Apache Kafka could not be fetched")
        total_fail=$((total_fail + 1))
      elif ! sdp_as_root bash scripts/connect.sh fetch >/dev/null; then
        # test/t/055_debezium_connect.pl: Kafka Connect and Debezium's PostgreSQL connector
        summary+=("kafka: Kafka Connect and Debezium could not be fetched")
        total_fail=$((total_fail + 1))
      elif ! rdkafka=$(bash scripts/librdkafka.sh); then
        summary+=("kafka: librdkafka could not be built")
        total_fail=$((total_fail + 1))
      else
        run_suite kafka "$SDP_PG_BIN" "$rdkafka" apache
      fi ;;
    *) sdp_log "unknown server '$s' in SDP_SERVERS"; total_fail=$((total_fail + 1)) ;;
  esac
done

printf '%s\n' "${summary[@]}"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
