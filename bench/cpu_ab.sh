#!/usr/bin/env bash
# bench/cpu_ab.sh: CPU time per event of a flow's worker, for two builds of
# sdp_ext side by side in one run, beside COPY's CPU time per row.
#
# CPU time (user + system, from /proc/PID/stat) is the figure that holds on
# a shared, noisy machine: wall-clock rates move with whatever else runs,
# the CPU a process spends on the same work much less.  The runs alternate
# A, B, A, B, ... over the very same messages (one topic filled once, read
# from its start by a new flow each run), so drift hits both alike.
#
# Usage: bash bench/cpu_ab.sh A.so B.so [RUNS] [EVENTS]
#   A.so, B.so   two builds of sdp_ext.so (same SQL surface), e.g. the
#                current tree's and one built from an earlier commit
#   RUNS         runs of each (default 5); EVENTS per run (default 200000)
#   AB_MODE=append  writes in append mode instead of upsert (every event is
#                a new aircraft either way): a faster flow, which drains a
#                backlog faster than librdkafka refills its queue
#   AB_TARGET=unindexed  the target without the primary key and indexes of
#                positions (append only), COPY into the same
#   AB_SOURCE_OPTIONS='{"queued.min.messages": "5000"}'  more properties of
#                the source (jsonb), e.g. a small local queue
#   AB_FLOW_OPTIONS='{"max_batch_rows": "20"}'  more options of the flow
#                (jsonb), e.g. small batches, where the per-batch costs weigh
# Measures the enrich flow of examples/flights.sql (upsert, every event a
# new aircraft) and, once, COPY of the same rows into the same table.
# Prints per-run figures and the medians; nothing is asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
. bench/server.sh

a=$(readlink -f "$1"); b=$(readlink -f "$2"); runs=${3:-5}; n=${4:-200000}
mode=${AB_MODE:-upsert}
like='INCLUDING ALL'
[ "${AB_TARGET:-}" = unindexed ] && like='INCLUDING DEFAULTS'
[ "${AB_TARGET:-}" = unindexed ] && [ "$mode" = upsert ] && { echo "AB_TARGET=unindexed needs AB_MODE=append" >&2; exit 2; }
port=${BENCH_PORT:-5491}
sdp_install_packages bc
sdp_build_install
pkglib=$("$SDP_PG_BIN/pg_config" --pkglibdir)
cp "$pkglib/sdp_ext.so" /tmp/sdp_ext.installed.so
ticks=$(getconf CLK_TCK)

bench_server cpu_ab
bench_on_exit='sdp_as_root cp /tmp/sdp_ext.installed.so "$pkglib/sdp_ext.so"'
start_with() {  # .so
  sdp_as_root cp "$1" "$pkglib/sdp_ext.so"
  bench_start
}
stop_pg() { bench_stop; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

bench_broker ab:16	# embedded, or Apache Kafka with SDP_BENCH_BROKER=kafka; sets $source_options
tools/flight_sim --bootstrap "$boot" --topic ab --aircraft "$n" --count "$n" --rate 0 --quiet > "$dir/sim.json"

start_with "$a"
sql -c 'CREATE EXTENSION sdp_ext'
sed -n '/^CREATE TABLE zones/,/^SELECT sdp_create_source/p' examples/flights.sql | sed '$d' | sql >/dev/null
transform=$(sed -n '/^  transform => \$\$$/,/\$\$,$/p' examples/flights.sql | sed '1s/^  transform => \$\$//; $s/\$\$,$//')
sql -c "SELECT sdp_create_source('ab', '$boot', 'ab', '{\"starting_offsets\": \"earliest\"}'::jsonb || '$source_options' || '${AB_SOURCE_OPTIONS:-{\}}')" >/dev/null
stop_pg

declare -A us rate
for i in $(seq "$runs"); do
  for label in A B; do
    so=$a; [ $label = B ] && so=$b
    start_with "$so"
    sql >/dev/null <<SQL
DROP TABLE IF EXISTS pos_ab;
CREATE TABLE pos_ab (LIKE positions $like);
SELECT sdp_create_flow('ab', source => 'ab', target => 'pos_ab',
  schema => 'icao24 text, callsign text, lat float8, lon float8, baro_alt float8, vert_rate float8,
             squawk text, velocity float8, heading float8, poller_ts timestamptz',
  transform => \$t\$ ${transform//positions/pos_ab} \$t\$,
  options => '{"mode": "$mode"}'::jsonb || '${AB_FLOW_OPTIONS:-{\}}');
SQL
    # the drain is timed from the first message read (the worker's start is not)
    until [ "$(sql -c "SELECT coalesce(messages_read, 0) > 0 FROM sdp.flow_status WHERE flow = 'ab'")" = t ]; do
      sleep 0.01
    done
    t0=$(date +%s.%N)
    until [ "$(sql -c "SELECT coalesce(messages_read, 0) >= $n FROM sdp.flow_status WHERE flow = 'ab'")" = t ]; do
      [ "$(sql -c "SELECT state FROM sdp.flow_status WHERE flow = 'ab'")" = failed ] && { echo "flow failed" >&2; exit 1; }
      sleep 0.01
    done
    t1=$(date +%s.%N)
    pid=$(sql -c "SELECT pid FROM sdp.flow_status WHERE flow = 'ab'")
    t=$(cpu_ticks "$pid")
    v=$(echo "$t * 1000000 / $ticks / $n" | bc -l)
    r=$(echo "$n / ($t1 - $t0)" | bc -l)
    us[$label]="${us[$label]:-} $v"
    rate[$label]="${rate[$label]:-} $r"
    printf 'run %d %s: %.2f us CPU per event (%d ticks); drained at %.0f events/s, worker on CPU %.0f%% of the time\n' \
      "$i" "$label" "$v" "$t" "$r" "$(echo "100 * $t / $ticks / ($t1 - $t0)" | bc -l)"
    sql -c "SELECT sdp_drop_flow('ab')" >/dev/null
    stop_pg
  done
done

# COPY of the same rows into the same (emptied) table, CPU of its backend
start_with "$a"
sql -c "COPY pos_ab TO '$dir/rows.csv' (FORMAT csv)"
rows=$(sql -c 'SELECT count(*) FROM pos_ab')
sql -c 'TRUNCATE pos_ab'
copy_ticks=$(sql <<SQL
SELECT pg_backend_pid() AS bpid \gset
\setenv BPID :bpid
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat
COPY pos_ab FROM '$dir/rows.csv' (FORMAT csv);
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat
SQL
)
c0=$(echo "$copy_ticks" | sed -n 1p); c1=$(echo "$copy_ticks" | sed -n 2p)
copy_us=$(echo "($c1 - $c0) * 1000000 / $ticks / $rows" | bc -l)
stop_pg

ma=$(echo "${us[A]}" | median); mb=$(echo "${us[B]}" | median)
echo
printf 'A %s\nB %s\n' "$a" "$b"
printf 'median CPU per event: A %.2f us, B %.2f us, B/A %.3f (%d runs each, %d events)\n' "$ma" "$mb" "$(echo "$mb / $ma" | bc -l)" "$runs" "$n"
ra=$(echo "${rate[A]}" | median); rb=$(echo "${rate[B]}" | median)
printf 'median drain rate (from its first message read to its last): A %.0f, B %.0f events/s, B/A %.2f\n' "$ra" "$rb" "$(echo "$rb / $ra" | bc -l)"
printf 'COPY of the same %d rows: %.2f us CPU per row; A/COPY %.2f, B/COPY %.2f\n' "$rows" "$copy_us" \
  "$(echo "$ma / $copy_us" | bc -l)" "$(echo "$mb / $copy_us" | bc -l)"
