#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]: the fuzz targets of fuzz/
# (issue 46), built with clang and libFuzzer, each run for a bounded time.
#
#   pb_schema        a plain program over exec/protobuf_reflect.cpp (no
#                    PostgreSQL): a registry's .proto files and a message
#   registry_answer  a registry's answer, parsed and used as a worker does
#   avro_decode      Avro bodies of fixed writer schemas
#   avro_schema      Avro writer schemas, and a body of each
#   json_decode      JSON messages (the fast path against PostgreSQL's parser)
#   debezium         Debezium change events and their keys, JSON and Avro
#
# All but pb_schema run in a single-user backend (postgres --single) of the
# server PG_CONFIG names (default: the pg_config in PATH; CI's is the
# assert-enabled 15), in a throwaway data directory, sdp_ext not preloaded,
# with AddressSanitizer's runtime preloaded (fuzz/sdp_fuzz.c says how); the
# data directory has two databases, postgres in UTF8 and latin1 in LATIN1.
# Every target runs with the stack a server has (ulimit -s 8192).
#
# Each target first runs, once each, its checked-in corpus (fuzz/corpus/TARGET)
# and the large regression inputs that fuzz/regressions.py writes, in each
# database, then
# fuzzes from the corpus for SECONDS_PER_TARGET (default 60) in a scratch copy
# of it: what it finds is not written into the tree.  An input that crashes,
# trips a sanitizer, an assertion or an internal error, or runs past the
# timeout, is copied into fuzz/crashes/TARGET/ (for a human to move into
# fuzz/corpus/TARGET/ with the fix) and its path printed; the exit status is
# then 1.  One line per target: "fuzz TARGET: N runs in S s (E exec/s), ...".
#
#   PG_CONFIG=/var/cache/sdp_ext/pg15-cassert/bin/pg_config bash scripts/fuzz.sh 300
#   bash scripts/fuzz.sh 30 json_decode debezium
#   SDP_FUZZ_TIMEOUT=2      seconds one input may take (default 2; the replay 10)
#   SDP_FUZZ_MAX_LEN=65536  the largest input libFuzzer makes
#   SDP_FUZZ_DIR=DIR        work there (default a new directory under /tmp, kept)
#   SDP_FUZZ_DATABASE=latin1  fuzz in the LATIN1 database (default postgres, UTF8)
#   SDP_FUZZ_REGRESSIONS=0  leave fuzz/regressions.py's inputs out (to fuzz a tree
#                           that does not have their fixes yet)
#
# Run as root it installs what is missing (clang, libclang-rt-14-dev), and runs
# the backend as the postgres OS user; as another user it needs them installed
# (scripts/test.sh does it).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

ALL_TARGETS=(pb_schema registry_answer avro_decode avro_schema json_decode debezium)
FUZZ_PACKAGES=(clang libclang-rt-14-dev python3)

seconds=${1:-60}
shift $(($# > 0 ? 1 : 0))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${ALL_TARGETS[@]}")
timeout_s=${SDP_FUZZ_TIMEOUT:-2}
replay_timeout_s=10
max_len=${SDP_FUZZ_MAX_LEN:-65536}
pg_config=${PG_CONFIG:-pg_config}
fuzz_db=${SDP_FUZZ_DATABASE:-postgres}
case $fuzz_db in postgres|latin1) ;; *) sdp_log "SDP_FUZZ_DATABASE is postgres (UTF8) or latin1"; exit 2 ;; esac

for t in "${targets[@]}"; do
  case " ${ALL_TARGETS[*]} " in *" $t "*) ;; *) sdp_log "no fuzz target '$t' (${ALL_TARGETS[*]})"; exit 2 ;; esac
done

missing=()
for p in "${FUZZ_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    sdp_install_packages "${FUZZ_PACKAGES[@]}"
  else
    sdp_log "missing packages: ${missing[*]} (scripts/test.sh installs them, as root)"
    exit 2
  fi
fi

bindir=$("$pg_config" --bindir) || { sdp_log "no pg_config at '$pg_config'"; exit 2; }
work=${SDP_FUZZ_DIR:-$(mktemp -d /tmp/sdp_fuzz.XXXXXX)}
mkdir -p "$work"
asan_rt=$(clang --print-runtime-dir)/libclang_rt.asan-x86_64.so

# a command as the postgres OS user when we are root (who may not run a server), else as ourselves
mkdir -p "$work/bin"
cat >"$work/bin/as_postgres" <<'SH'
#!/bin/sh
if [ "$(id -u)" -eq 0 ]; then exec runuser -u postgres -- "$@"; else exec "$@"; fi
SH
chmod 755 "$work/bin/as_postgres"
as_pg=$work/bin/as_postgres

sdp_log "building the fuzz targets against $("$pg_config" --version) ($pg_config) in $work/build"
if ! make -s -f fuzz/Makefile -j2 PG_CONFIG="$pg_config" BUILD="$work/build" >"$work/build.log" 2>&1; then
  grep -E 'error|Error' "$work/build.log" | head -20
  sdp_log "the build failed: $work/build.log"
  exit 1
fi
rm -rf "$work/regressions"
if [ "${SDP_FUZZ_REGRESSIONS:-1}" != 0 ]; then
  python3 fuzz/regressions.py "$work/regressions" || exit 1
fi
rm -rf "$work/data"
[ "$(id -u)" -eq 0 ] && chown -R postgres: "$work"
# two databases: postgres in UTF8, latin1 in LATIN1 (a server encoding other than the messages')
if ! "$as_pg" "$bindir/initdb" -D "$work/data" -A trust -U postgres -E UTF8 --locale=C -N >"$work/initdb.log" 2>&1 ||
   ! echo "CREATE DATABASE latin1 TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C';" |
     "$as_pg" "$bindir/postgres" --single -D "$work/data" -c fsync=off postgres >>"$work/initdb.log" 2>&1 ||
   grep -q ERROR "$work/initdb.log"; then
  sdp_log "initdb failed: $work/initdb.log"
  exit 1
fi

# run TARGET DATABASE LOG ARG...: libFuzzer over TARGET (in DATABASE of the backend) with these
# arguments, its output in LOG; its status
run() {
  local t=$1 db=$2 log=$3 sql a
  shift 3
  if [ "$t" = pb_schema ]; then
    (ulimit -s 8192; exec timeout -k 10 $((seconds + 300)) "$work/build/pb_schema" "$@") >"$log" 2>&1
    return
  fi
  sql=$work/$t.sql
  {
    echo "CREATE OR REPLACE FUNCTION sdp_fuzz_run(text, text[]) RETURNS int AS '$work/build/sdp_fuzz.so' LANGUAGE C STRICT;"
    printf "SELECT sdp_fuzz_run('%s', ARRAY['-detect_leaks=0'" "$t"
    for a in "$@"; do printf ", '%s'" "${a//\'/\'\'}"; done
    echo "]);"
  } >"$sql"
  (ulimit -s 8192
   exec timeout -k 10 $((seconds + 300)) "$as_pg" env LD_PRELOAD="$asan_rt" \
     ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:detect_stack_use_after_return=0 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     "$bindir/postgres" --single -D "$work/data" -c fsync=off -c log_checkpoints=off "$db") <"$sql" >"$log" 2>&1
}

# report TARGET LOG WHAT: why a run failed, and its reproducer (copied into fuzz/crashes/TARGET/)
report() {
  local t=$1 log=$2 what=$3 f n=0
  echo "--- fuzz $t: $what failed; libFuzzer's output: $log"
  grep -E '^(==[0-9]+==|SUMMARY|ALARM|sdp_fuzz: |pb_schema: |.*runtime error: |TRAP|.*Assert|    #[0-9] |    #1[0-9] )' "$log" | tail -40
  for f in "$work/artifacts/$t"/*; do
    [ -f "$f" ] || continue
    mkdir -p "fuzz/crashes/$t" && cp "$f" "fuzz/crashes/$t/" && n=$((n + 1))
    echo "reproducer: fuzz/crashes/$t/$(basename "$f") (bash scripts/fuzz.sh 0 $t runs it once it is in fuzz/corpus/$t/)"
  done
  if [ "$n" -eq 0 ]; then
    # a replay: the input it was running
    f=$(sed -n 's/^Running: //p' "$log" | tail -1)
    case $f in
      "$work/regressions/"*) echo "reproducer: fuzz/regressions.py's $t/$(basename "$f") (written to $f)" ;;
      "$work/corpus/"*) echo "reproducer: fuzz/corpus/$t/$(basename "$f")" ;;
      ?*) echo "reproducer: $f" ;;
    esac
  fi
}

failed=0
for t in "${targets[@]}"; do
  log_fuzz=$work/$t.fuzz.log
  rm -rf "$work/artifacts/$t" "$work/corpus/$t"
  mkdir -p "$work/artifacts/$t" "$work/corpus/$t"
  [ -d "fuzz/corpus/$t" ] && cp fuzz/corpus/"$t"/* "$work/corpus/$t/" 2>/dev/null
  [ "$(id -u)" -eq 0 ] && chown -R postgres: "$work/artifacts" "$work/corpus"
  common=(-rss_limit_mb=2048 -artifact_prefix="$work/artifacts/$t/")
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="$PWD/fuzz/dict/$t.dict")

  # every input of the corpus and the regressions, once each (the backend's targets in both databases)
  files=()
  for f in "$work/corpus/$t"/* "$work/regressions/$t"/*; do [ -f "$f" ] && files+=("$f"); done
  replayed=${#files[@]}
  dbs=(postgres latin1)
  [ "$t" = pb_schema ] && dbs=(postgres)
  replay_failed=0
  for db in "${dbs[@]}"; do
    [ "$replayed" -gt 0 ] || break
    log_replay=$work/$t.replay.$db.log
    run "$t" "$db" "$log_replay" "${common[@]}" -timeout=$replay_timeout_s "${files[@]}"
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q 'fuzzing was not performed' "$log_replay"; then
      report "$t" "$log_replay" "the replay of its corpus and regressions (database $db)"
      echo "fuzz $t: replayed $replayed inputs in database $db: FAILED (status $rc)"
      replay_failed=1
      break
    fi
  done
  if [ $replay_failed -ne 0 ]; then
    failed=1
    continue
  fi
  [ "$seconds" -gt 0 ] || { echo "fuzz $t: replayed $replayed inputs: OK"; continue; }
  [ "$fuzz_db" != postgres ] && [ "$t" != pb_schema ] && sdp_log "fuzzing $t in database $fuzz_db"

  run "$t" "$fuzz_db" "$log_fuzz" "${common[@]}" -timeout="$timeout_s" -max_total_time="$seconds" -max_len="$max_len" \
    -print_final_stats=1 "${dict[@]}" "$work/corpus/$t"
  rc=$?
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1/p' "$log_fuzz" | tail -1)
  secs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log_fuzz" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log_fuzz" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\).*/cov \1, features \2, corpus \3/p' <<<"$last")
  if [ $rc -ne 0 ] || [ -z "$runs" ]; then
    report "$t" "$log_fuzz" "fuzzing"
    echo "fuzz $t: replayed $replayed inputs; ${runs:-?} runs; ${cov:-no coverage line}: FAILED (status $rc)"
    failed=1
    continue
  fi
  echo "fuzz $t: replayed $replayed inputs; $runs runs in $secs s ($((runs / (secs > 0 ? secs : 1))) exec/s), $cov: OK"
done
sdp_log "logs, corpora and artifacts in $work"
exit $failed
