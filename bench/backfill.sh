#!/usr/bin/env bash
# bench/backfill.sh: a backfill (sdp_backfill) beside COPY of the same rows
# into the same table: rows per second, and CPU time per 1,000 rows.
#
# The history is what a flow archived from the topic: N aircraft positions
# of tools/flight_sim over 8 partitions, drained by an append flow into a
# table with their kafka_partition and kafka_offset (its primary key, the
# backfill's default order).  Each run creates the flow of the case
# stopped, backfills it from the history (boundary: right after the
# table's offsets, the topic's end), and takes
#   - the worker's CPU time (user + system, /proc/PID/stat) when the
#     backfill is done, and its time from its first row to its last (its
#     own log line: "finished its backfill ... N of them in S s");
#   - then COPY of the very rows it wrote back into the same table, emptied,
#     from a CSV file: the COPY backend's CPU and the COPY's wall time.
#
#   plain    no transform: the schema's columns into a table of them
#   append   the enrich flow of examples/flights.sql (the SQL transform
#            with its zone lookup) into an unindexed copy of positions
#
# Usage: bash bench/backfill.sh [ROWS] [RUNS]   (default 500000 rows, 3
#        runs; the medians are printed).  It installs the current tree into
#        Debian's PostgreSQL, starts its own server (port 5494) and broker,
#        and leaves nothing running.  Nothing is asserted.  The flows'
#        max_batch_rows is the default (BACKFILL_FLOW_OPTIONS='{"max_batch_rows":
#        5000}' adds options).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
. bench/server.sh

n=${1:-500000}; runs=${2:-3}
port=${BENCH_PORT:-5494}
sdp_install_packages bc
sdp_build_install
ticks=$(getconf CLK_TCK)

bench_server backfill
bench_start
# the embedded broker keeps about 5 MiB per partition: the history goes to the topic in slices
bench_broker pos:8
sql -c 'CREATE EXTENSION sdp_ext'
sed -n '/^CREATE TABLE zones/,/^SELECT sdp_create_source/p' examples/flights.sql | sed '$d' | sql >/dev/null
transform=$(sed -n '/^  transform => \$\$$/,/\$\$,$/p' examples/flights.sql | sed '1s/^  transform => \$\$//; $s/\$\$,$//')
pos_schema='icao24 text, callsign text, lat float8, lon float8, baro_alt float8, vert_rate float8, squawk text, velocity float8, heading float8, poller_ts timestamptz'
sql >/dev/null <<SQL
SELECT sdp_create_source('pos', '$boot', 'pos', '{"starting_offsets": "earliest"}'::jsonb || '$source_options');
-- the backfilled flows start at the topic's end: they read nothing before they are stopped
SELECT sdp_create_source('pos_new', '$boot', 'pos', '{"starting_offsets": "latest"}'::jsonb || '$source_options');
CREATE TABLE history ($pos_schema, kafka_partition int, kafka_offset bigint, PRIMARY KEY (kafka_partition, kafka_offset));
SELECT sdp_create_flow('archive', source => 'pos', target => 'history', schema => '$pos_schema');
SQL

# the history, 150,000 messages at a time (the embedded broker's retention); the topic keeps the last slice
made=0
while [ "$made" -lt "$n" ]; do
  c=$(( n - made < 150000 ? n - made : 150000 ))
  tools/flight_sim --bootstrap "$boot" --topic pos --aircraft "$c" --count "$c" --rate 0 --linger-ms 100 \
    --seq-start "$made" --seed $((made + 1)) --quiet > /dev/null
  made=$((made + c))
  until [ "$(sql -c "SELECT count(*) >= $made FROM history")" = t ]; do sleep 0.2; done
done
sql -c "SELECT sdp_stop_flow('archive')" >/dev/null
rows=$(sql -c "SELECT count(*) FROM history")
sql -c "VACUUM ANALYZE history"

declare -A bf_rate bf_cpu copy_rate copy_cpu_us
run_case() {  # label target-create flow-create
  local label=$1 pid secs cpu0 c w
  for i in $(seq "$runs"); do
    sql -c "DROP TABLE IF EXISTS bf_$label" >/dev/null 2>&1
    sql >/dev/null <<<"$2"
    until [ "$(sql -c "SELECT state = 'running' AND partitions IS NOT NULL FROM sdp.flow_status WHERE flow = '$label'")" = t ]; do sleep 0.05; done
    sql -c "SELECT sdp_stop_flow('$label')" >/dev/null
    until [ "$(sql -c "SELECT state FROM sdp.flow_status WHERE flow = '$label'")" = stopped ]; do sleep 0.05; done
    local logpos; logpos=$(wc -c < "$dir/postgres.log")
    sql -c "SELECT sdp_backfill('$label', 'history')" >/dev/null
    until [ "$(sql -c "SELECT state FROM sdp.backfill_status WHERE flow = '$label'")" = done ]; do
      [ "$(sql -c "SELECT state FROM sdp.flow_status WHERE flow = '$label'")" = failed ] && { echo "flow $label failed" >&2; exit 1; }
      sleep 0.05
    done
    pid=$(sql -c "SELECT pid FROM sdp.flow_workers WHERE flow = '$label'")
    cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    secs=$(tail -c +"$((logpos + 1))" "$dir/postgres.log" | sed -n "s/.*flow \"$label\" finished its backfill.* of them in \([0-9.]*\) s by this worker.*/\1/p" | tail -1)
    bf_rate[$label]="${bf_rate[$label]:-} $(echo "$rows / $secs" | bc -l)"
    bf_cpu[$label]="${bf_cpu[$label]:-} $(echo "$cpu0 * 1000000 / $ticks / $rows" | bc -l)"
    [ "$(sql -c "SELECT count(*) FROM bf_$label")" = "$rows" ] || { echo "backfill $label wrote $(sql -c "SELECT count(*) FROM bf_$label") rows, not $rows" >&2; exit 1; }
    sql -c "SELECT sdp_drop_flow('$label')" >/dev/null
    sleep 1
    read -r c w <<<"$(copy_cpu "bf_$label" wall)"
    copy_cpu_us[$label]="${copy_cpu_us[$label]:-} $c"
    copy_rate[$label]="${copy_rate[$label]:-} $(echo "$rows / $w" | bc -l)"
  done
}
opts=${BACKFILL_FLOW_OPTIONS:-{\}}
run_case plain "CREATE TABLE bf_plain ($pos_schema);
SELECT sdp_create_flow('plain', source => 'pos_new', target => 'bf_plain', schema => '$pos_schema', options => '$opts');"
run_case append "CREATE TABLE bf_append (LIKE positions INCLUDING DEFAULTS);
SELECT sdp_create_flow('append', source => 'pos_new', target => 'bf_append', schema => '$pos_schema',
  transform => \$t\$ ${transform//positions/bf_append} \$t\$, options => '$opts');"

echo "sdp_backfill beside COPY of the same rows into the same table ($rows rows, medians of $runs runs)"
printf '%-8s %14s %14s %7s %16s %16s %7s\n' case backfill_rows/s copy_rows/s ratio backfill_ms/1k copy_ms/1k ratio
for c in plain append; do
  br=$(echo "${bf_rate[$c]}" | median); cr=$(echo "${copy_rate[$c]}" | median)
  bc_=$(echo "${bf_cpu[$c]}" | median); cc=$(echo "${copy_cpu_us[$c]}" | median)
  printf '%-8s %14.0f %14.0f %7.2f %16.2f %16.2f %7.2f\n' "$c" "$br" "$cr" "$(echo "$br / $cr" | bc -l)" \
    "$bc_" "$cc" "$(echo "$bc_ / $cc" | bc -l)"
done
