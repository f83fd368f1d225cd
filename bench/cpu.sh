#!/usr/bin/env bash
# bench/cpu.sh: CPU time per 1,000 events of a flow's workers beside COPY's
# CPU time per 1,000 rows, and drain rates with 1, 2 and 4 workers.
#
# CPU time (user + system, from /proc/PID/stat) is the figure that holds on a
# shared, noisy machine: a rate moves with whatever else runs, the CPU a
# process spends on the same work much less.  Each case drains a backlog
# produced beforehand (flat out, in record batches of up to 100 ms of
# production, so that a fetch brings what a Kafka broker's would) into a fresh
# target, timed from the flow's first message read to its last; then the
# very rows it wrote are COPYed (server-side, from a CSV file) into the same
# table, emptied, with the CPU of the COPY backend measured the same way.
#
#   append     the enrich flow of examples/flights.sql (JSON decode, the SQL
#              transform with the zone lookup) into an unindexed copy of
#              positions; every event a new aircraft
#   upsert     the same into a copy of positions with its primary key
#   window_agg payment events, 5 aggregations per merchant (count, sum, avg,
#              ratio, approx_distinct) over 10,000 merchants, 1-minute
#              windows; beside it COPY of the same events into a plain table
#   plain      append, no transform: the declared fields into an unindexed
#              table of them (decode and write alone)
#   protobuf   plain's rows as Protobuf values, the same way (optional fields,
#              a Timestamp; Confluent's ProtobufSerializer)
#   avro       plain's rows as Avro values (written by Confluent's serializer,
#              tools/avro_produce.py, their schema in Apicurio Registry:
#              scripts/registry.sh), decoded and written the same way
#   workers    the append case over 8 partitions with workers = 1, 2 and 4:
#              drain rate, and CPU per 1,000 events summed over the workers
#
# Usage: bash bench/cpu.sh [EVENTS] [RUNS]   (default 150000 events, 3 runs;
#        the median of the runs is printed).  It installs the current tree
#        into Debian's PostgreSQL, starts its own server (port 5493) and
#        broker, and leaves nothing running.  Nothing is asserted.  The
#        embedded broker keeps about 5 MiB per partition: past about 180,000
#        events over 8 partitions it deletes the oldest, and a drain would
#        never see them all (the script says so and stops).
#        CPU_CASES="append upsert" runs only those cases (default: all);
#        CPU_PERF=DIR records each run's workers with perf (perf record -g,
#        from the first message read to the last) into DIR/<case>.<run>.data.
#        CPU_AB="A.so B.so": two builds of sdp_ext.so (same SQL surface) side
#        by side: each run of a case is made with A, then with B (the server
#        restarted with each), and the medians are printed per build.
#        CPU_SOURCE_OPTIONS='{"fetch.wait.max.ms": "5"}' adds librdkafka
#        properties to the sources, CPU_FLOW_OPTIONS='{"max_batch_rows": 2000}'
#        options to the flows (jsonb).
#        CPU_LINGER_MS=N: the producers' linger.ms while they make the backlog
#        (default 100; 0 makes record batches of a few messages, and the
#        embedded broker serves one record batch per partition per fetch:
#        bench/README.md, "Record batches as a broker serves them").
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
. bench/server.sh

n=${1:-150000}; runs=${2:-3}
port=${BENCH_PORT:-5493}
sdp_install_packages bc
sdp_build_install
ticks=$(getconf CLK_TCK)
builds=(cur); sos=()
if [ -n "${CPU_AB:-}" ]; then
  read -r -a sos <<<"$CPU_AB"
  [ ${#sos[@]} -eq 2 ] || { echo "CPU_AB needs two .so files" >&2; exit 2; }
  sos=("$(readlink -f "${sos[0]}")" "$(readlink -f "${sos[1]}")")
  builds=(A B)
  pkglib=$("$SDP_PG_BIN/pg_config" --pkglibdir)
  cp "$pkglib/sdp_ext.so" /tmp/sdp_ext.cpu_installed.so
fi

bench_server cpu
[ -n "${CPU_AB:-}" ] && bench_on_exit='sdp_as_root cp /tmp/sdp_ext.cpu_installed.so "$pkglib/sdp_ext.so"'
[ -n "${CPU_AB:-}" ] && sdp_as_root cp "${sos[0]}" "$pkglib/sdp_ext.so"
bench_start
# use_build A|B|cur: the server runs that build of sdp_ext (restarted when it changes)
current=${builds[0]}
use_build() {
  [ "$1" = "$current" ] && return 0
  bench_stop
  if [ "$1" = A ]; then sdp_as_root cp "${sos[0]}" "$pkglib/sdp_ext.so"; else sdp_as_root cp "${sos[1]}" "$pkglib/sdp_ext.so"; fi
  bench_start
  current=$1
}

bench_broker pos:8 pay:8 pos_avro:8 pos_proto:8
tools/flight_sim --bootstrap "$boot" --topic pos --aircraft "$n" --count "$n" --rate 0 --linger-ms "${CPU_LINGER_MS:-100}" --quiet > /dev/null
tools/payment_sim --bootstrap "$boot" --topic pay --merchants 10000 --count "$n" --rate 0 --event-time step:1 --linger-ms "${CPU_LINGER_MS:-100}" --quiet > /dev/null

sql -c 'CREATE EXTENSION sdp_ext'
sed -n '/^CREATE TABLE zones/,/^SELECT sdp_create_source/p' examples/flights.sql | sed '$d' | sql >/dev/null
transform=$(sed -n '/^  transform => \$\$$/,/\$\$,$/p' examples/flights.sql | sed '1s/^  transform => \$\$//; $s/\$\$,$//')
sql >/dev/null <<SQL
SELECT sdp_create_source('pos', '$boot', 'pos', '{"starting_offsets": "earliest"}'::jsonb || '$source_options' || '${CPU_SOURCE_OPTIONS:-{\}}');
SELECT sdp_create_source('pay', '$boot', 'pay', '{"starting_offsets": "earliest"}'::jsonb || '$source_options' || '${CPU_SOURCE_OPTIONS:-{\}}');
SQL
pos_schema='icao24 text, callsign text, lat float8, lon float8, baro_alt float8, vert_rate float8, squawk text, velocity float8, heading float8, poller_ts timestamptz'

# drain FLOW: waits for its last message; prints "seconds ticks batches" (CPU of every worker of the flow)
drain() {
  local flow=$1 t0 t1 t
  until [ "$(sql -c "SELECT coalesce(messages_read, 0) > 0 FROM sdp.flow_status WHERE flow = '$flow'")" = t ]; do sleep 0.01; done
  t0=$(date +%s.%N)
  local perfpid=
  if [ -n "${CPU_PERF:-}" ]; then
    perf record -g -o "$CPU_PERF/$flow.$(date +%H%M%S).data" \
      -p "$(sql -c "SELECT string_agg(pid::text, ',') FROM sdp.flow_workers WHERE flow = '$flow' AND pid IS NOT NULL")" \
      >/dev/null 2>&1 &
    perfpid=$!
  fi
  until [ "$(sql -c "SELECT coalesce(messages_read, 0) >= $n FROM sdp.flow_status WHERE flow = '$flow'")" = t ]; do
    [ "$(sql -c "SELECT state FROM sdp.flow_status WHERE flow = '$flow'")" = failed ] && { echo "flow $flow failed" >&2; exit 1; }
    [ "$(sql -c "SELECT lag = 0 AND messages_read < $n FROM sdp.flow_status WHERE flow = '$flow'")" = t ] &&
      [ "$(sql -c "SELECT sum(next_offset) >= $n AND min(state_offset) > 0 FROM sdp.offsets o JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = '$flow'")" = t ] &&
      { echo "flow $flow started past offset 0: the broker deleted messages (retention); use fewer events" >&2; exit 1; }
    sleep 0.01
  done
  t1=$(date +%s.%N)
  [ -n "$perfpid" ] && { kill -INT "$perfpid"; wait "$perfpid" || true; }
  t=0
  for pid in $(sql -c "SELECT pid FROM sdp.flow_workers WHERE flow = '$flow' AND pid IS NOT NULL"); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$(echo "$t1 - $t0" | bc -l) $t $(sql -c "SELECT batches FROM sdp.flow_status WHERE flow = '$flow'")"
}
declare -A cpu rate copy batch
run_case() {  # label create-sql target copy-table: the flow named label drains the backlog, runs times
  local label=$1 create=$2 target=$3 copytable=$4 res secs t nb
  [ -n "${CPU_CASES:-}" ] && ! [[ " $CPU_CASES " == *" $label "* ]] && return 0
  for i in $(seq "$runs"); do
    for bld in "${builds[@]}"; do
      use_build "$bld"
      sql -c "DROP TABLE IF EXISTS $target" >/dev/null 2>&1
      sql >/dev/null <<<"$create"
      res=$(drain "$label"); read -r secs t nb <<<"$res"
      batch[$label.$bld]="${batch[$label.$bld]:-} $(echo "$n / $nb" | bc -l)"
      cpu[$label.$bld]="${cpu[$label.$bld]:-} $(echo "$t * 1000000 / $ticks / $n" | bc -l)"
      rate[$label.$bld]="${rate[$label.$bld]:-} $(echo "$n / $secs" | bc -l)"
      [ -n "${CPU_AB:-}" ] && printf '  %s run %d %s: %.2f ms/1k, %.0f events/batch\n' "$label" "$i" "$bld" \
        "$(echo "$t * 1000000 / $ticks / $n" | bc -l)" "$(echo "$n / $nb" | bc -l)" >&2
      sql -c "SELECT sdp_drop_flow('$label')" >/dev/null
      sleep 1
      copy[$label]="${copy[$label]:-} $(copy_cpu "$copytable")"
    done
  done
}

enrich() {  # flow table like mode workers
  cat <<SQL
CREATE TABLE $2 (LIKE positions $3);
SELECT sdp_create_flow('$1', source => 'pos', target => '$2', schema => '$pos_schema',
  transform => \$t\$ ${transform//positions/$2} \$t\$, options => '{"mode": "$4", "workers": $5}'::jsonb || '${CPU_FLOW_OPTIONS:-{\}}');
SQL
}
run_case append "$(enrich append pos_append 'INCLUDING DEFAULTS' append 1)" pos_append pos_append
run_case upsert "$(enrich upsert pos_upsert 'INCLUDING ALL' upsert 1)" pos_upsert pos_upsert
# the decode and the write alone: no transform, the input's columns into a table of them
run_case plain "CREATE TABLE pos_plain ($pos_schema);
SELECT sdp_create_flow('plain', source => 'pos', target => 'pos_plain', schema => '$pos_schema',
  options => '${CPU_FLOW_OPTIONS:-{\}}');" pos_plain pos_plain
# avro, protobuf: the rows of the plain case as Avro (Protobuf) values (Confluent's
# serializers; the schema in a registry, Apicurio's), decoded and written the same way:
# the format's cost beside JSON's
if [ -z "${CPU_CASES:-}" ] || [[ " $CPU_CASES " == *" avro "* || " $CPU_CASES " == *" protobuf "* ]]; then
  sdp_as_root bash scripts/registry.sh fetch >/dev/null
  venv=$(sdp_as_root bash scripts/pyavro.sh)
  reg_url=$(bash scripts/registry.sh start "$dir/registry" --exit-with $$ | sed -n 's/^REGISTRY_URL=//p')
  sql >/dev/null <<SQL
CREATE TABLE pos_rows ($pos_schema);
SELECT sdp_create_flow('pos_rows', source => 'pos', target => 'pos_rows', schema => '$pos_schema');
SQL
  drain pos_rows >/dev/null
  sql -c "SELECT sdp_drop_flow('pos_rows')" >/dev/null
  sql -c "COPY (SELECT to_json(r) FROM pos_rows r) TO STDOUT" > "$dir/rows.jsonl"
  for fmt in avro protobuf; do
    [ -z "${CPU_CASES:-}" ] || [[ " $CPU_CASES " == *" $fmt "* ]] || continue
    topic=pos_avro; [ $fmt = protobuf ] && topic=pos_proto
    python3 bench/avro_rows.py "$boot" $topic "$reg_url" $([ $fmt = protobuf ] && echo --protobuf) \
      < "$dir/rows.jsonl" > "$dir/${fmt}_spec.json"
    "$venv/bin/python" tools/avro_produce.py --summary-only "$dir/${fmt}_spec.json" > /dev/null
    sql >/dev/null <<SQL
SELECT sdp_create_source('$topic', '$boot', '$topic',
  '{"starting_offsets": "earliest", "format": "$fmt", "schema.registry.url": "$reg_url"}'::jsonb || '$source_options' || '${CPU_SOURCE_OPTIONS:-{\}}');
SQL
    run_case $fmt "CREATE TABLE ${topic}_t ($pos_schema);
SELECT sdp_create_flow('$fmt', source => '$topic', target => '${topic}_t', schema => '$pos_schema',
  options => '${CPU_FLOW_OPTIONS:-{\}}');" ${topic}_t ${topic}_t
  done
fi
run_case workers2 "$(enrich workers2 pos_w2 'INCLUDING DEFAULTS' append 2)" pos_w2 pos_w2
run_case workers4 "$(enrich workers4 pos_w4 'INCLUDING DEFAULTS' append 4)" pos_w4 pos_w4

if [ -z "${CPU_CASES:-}" ] || [[ " $CPU_CASES " == *" window_agg "* ]]; then
# window_agg; COPY's reference: the same payment events into a plain table (written once by a stateless flow)
pay_schema='merchant_id text, country text, method text, status text, amount numeric, event_ts timestamptz'
sql >/dev/null <<SQL
CREATE TABLE pay_events (merchant_id text, country text, method text, status text, amount numeric, event_ts timestamptz);
SELECT sdp_create_flow('pay_raw', source => 'pay', target => 'pay_events', schema => '$pay_schema');
SQL
drain pay_raw >/dev/null
sql -c "SELECT sdp_drop_flow('pay_raw')" >/dev/null
agg() {  # name operation [more]
  printf '{"name": "%s", "group_by": ["merchant_id"%s], "operation": "%s", %s "window_size": "1 minute"}' "$1" "${4:-}" "$2" "$3"
}
aggs="[$(agg payments count ''), $(agg approved_volume sum '"value": "amount", "filter": "status = '"'"'approved'"'"'",' ', "country"'),
 $(agg avg_ticket avg '"value": "amount",'), $(agg rejection_ratio ratio '"filter": "status = '"'"'rejected'"'"'", "denominator_filter": "true",'),
 $(agg countries approx_distinct '"value": "country",')]"
run_case window_agg "SELECT sdp_create_window_table('pay_windows');
SELECT sdp_create_flow('window_agg', source => 'pay', target => 'pay_windows', schema => '$pay_schema',
  operator => 'window_agg', options => '{\"event_time\": \"event_ts\", \"idle_timeout\": \"2 seconds\"}');
SELECT sdp_load_aggregations('window_agg', \$a\$$aggs\$a\$);" pay_windows pay_events

fi

echo "CPU time (user + system) per 1,000 events of the flow's workers, beside COPY's backend per 1,000 rows of the same rows"
echo "($n events, 8 partitions, broker $broker_kind, medians of $runs runs; drain rate from the first message read to the last)"
printf '  %-34s %12s %12s %8s %12s %12s\n' case "flow ms/1k" "COPY ms/1k" ratio "events/s" "events/batch"
for c in append upsert plain avro protobuf window_agg workers2 workers4; do
  for bld in "${builds[@]}"; do
  [ -n "${cpu[$c.$bld]:-}" ] || continue
  f=$(echo "${cpu[$c.$bld]}" | median); k=$(echo "${copy[$c]}" | median); r=$(echo "${rate[$c.$bld]}" | median); eb=$(echo "${batch[$c.$bld]}" | median)
  case $c in
    append) l="append, unindexed, 1 worker";; upsert) l="upsert, primary key, 1 worker";;
    plain) l="append, no transform, 1 worker";;
    avro) l="the same, Avro values";; protobuf) l="the same, Protobuf values";;
    window_agg) l="window_agg, 5 aggregations";; workers2) l="append, unindexed, 2 workers";; workers4) l="append, unindexed, 4 workers";;
  esac
  [ -n "${CPU_AB:-}" ] && l="$bld: $l"
  printf '  %-34s %12.1f %12.1f %8.2f %12.0f %12.0f\n' "$l" "$f" "$k" "$(echo "$f / $k" | bc -l)" "$r" "$eb"
  done
done
[ -n "${CPU_AB:-}" ] && printf 'A %s\nB %s\n' "${sos[0]}" "${sos[1]}"
true
