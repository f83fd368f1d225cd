#!/usr/bin/env bash
# bench/run.sh: the benchmark of sdp_ext (not a test: it measures, it does not assert).
#
# In one run, on this machine, with the producer, the broker and PostgreSQL
# sharing its cores:
#
#  1. throughput: positions_flow (the enrich flow of examples/flights.sql,
#     upsert) consuming while the producer runs flat out, in events/s at the
#     sink; then a COPY of the very rows the flow wrote into the same table,
#     emptied; the ratio of the two is the figure.  A second run with 2,000
#     aircraft reporting many times shows the upsert-heavy case.
#  2. latency: e2eLatencyMs P50/P99 of the flow at 1,000, 10,000 and 50,000
#     events/s, beside the transport floor: a bare librdkafka consumer
#     (tools/kafka_floor) reading the same messages in the same run, over the
#     same window as the flow's progress report.
#  3. both flows (enrich and zone congestion) on one topic at 10,000 events/s.
#  4. memory: the workers' RSS after warm-up and after a sustained run.
#  5. window_agg: events/s with 5 aggregations over 10,000 merchants; the
#     delay from the watermark passing a window's end to its row being
#     committed (readable); the latency of reading the last 24 windows of one
#     merchant by key (pgbench) while the stream runs.
#  6. a sink flow at 10,000 events/s: the enrich flow writing to a Kafka
#     topic, timed from its input's Kafka timestamp (carried in the output)
#     to the receipt of its output by a read_committed consumer, beside the
#     floor (bench/sink.sh has more: rounds, the same flow into a table,
#     throughput and CPU).
#
# Usage: bash bench/run.sh [--quick]      (--quick: smaller sizes, for a smoke test)
# Results: tables on stdout, and bench/out/<timestamp>.txt; a full run also
# writes them into bench/README.md's current figures (bench/current.sh;
# BENCH_README=0 leaves it alone)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
. bench/server.sh

quick=${1:-}
TPUT_N=300000; TPUT2_N=300000; RATES="1000 10000 50000"; MEM_RATE=5000; MEM_SECONDS=120
PAY_N=300000; PAY_SECONDS=30
if [ "$quick" = "--quick" ]; then TPUT_N=30000; TPUT2_N=30000; RATES="1000 10000"; MEM_SECONDS=30; PAY_N=30000; PAY_SECONDS=15; fi
port=${BENCH_PORT:-5489}

sdp_install_packages bc
sdp_build_install

bench_server bench 'track_commit_timestamp = on'
bench_start

bench_broker tput:32 tput2:16 lat1000:4 lat10000:4 lat50000:4 both:4 mem:8 pay:16 paylive20:4 paylive100:4 \
  paylive1000:4 sinkin:4 sinkout:4

# the tables and the transforms of examples/flights.sql, one flow per topic
sql -c 'CREATE EXTENSION sdp_ext'
sed -n '/^CREATE TABLE zones/,/^SELECT sdp_create_source/p' examples/flights.sql | sed '$d' | sql >/dev/null
sed -n '/^CREATE TABLE zone_alerts/,/^);/p' examples/flights.sql | sql >/dev/null
transform=$(sed -n '/^  transform => \$\$$/,/\$\$,$/p' examples/flights.sql | sed '1s/^  transform => \$\$//; $s/\$\$,$//')
make_flow() {  # name topic table progress_interval: the enrich flow
  sql >/dev/null <<SQL
CREATE TABLE $3 (LIKE positions INCLUDING ALL);
SELECT sdp_create_source('$1', '$boot', '$2', '$source_options');
SELECT sdp_create_flow('$1', source => '$1', target => '$3',
  schema => 'icao24 text, callsign text, lat float8, lon float8, baro_alt float8, vert_rate float8,
             squawk text, velocity float8, heading float8, poller_ts timestamptz',
  transform => \$t\$ ${transform//positions/$3} \$t\$,
  options => '{"mode": "upsert", "progress_interval": "$4"}');
SQL
}
make_zone_flow() {  # name source table progress_interval: the zone congestion flow
  sql >/dev/null <<SQL
CREATE TABLE $3 (LIKE zone_alerts INCLUDING ALL);
SELECT sdp_create_flow('$1', source => '$2', target => '$3',
  schema => 'icao24 text, lat float8, lon float8',
  transform => \$t\$SELECT z.zone, i.icao24, z.capacity FROM input i
                 JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat
                             AND i.lon BETWEEN z.min_lon AND z.max_lon\$t\$,
  operator => 'active_count',
  options => '{"key": "zone", "member": "icao24", "ttl": "30 seconds", "capacity_column": "capacity",
               "count_column": "aircraft_count", "alert_column": "crowded", "time_column": "updated_at",
               "progress_interval": "$4"}');
SQL
}
# A flow's report beside the floor over the same window: one table row.
report_row() {  # label report-json floor-file
  local label=$1 p=$2 file=$3 fp50 fp99 pp99 n win_end win_len lp50 lp99
  read -r fp50 fp99 pp99 n win_end win_len < <(sql -c "SELECT concat_ws(' ',
      j->'latencies'->'e2eLatencyMs'->>'P50', j->'latencies'->'e2eLatencyMs'->>'P99',
      j->'latencies'->'processingLatencyMs'->>'P99', j->'latencies'->'e2eLatencyMs'->>'samples',
      extract(epoch FROM (j->>'timestamp')::timestamptz) * 1000, (j->>'intervalSeconds')::float8 * 1000)
    FROM (SELECT '$p'::jsonb AS j) s")
  read -r lp50 lp99 < <(awk -v hi="$win_end" -v len="$win_len" '$1 >= hi - len && $1 <= hi {print $2}' "$file" \
      | sort -n | awk '{v[NR]=$1} END {if (NR == 0) {print "nan nan"; exit}
          i50 = int((NR*50+99)/100); i99 = int((NR*99+99)/100); printf "%.3f %.3f\n", v[i50]/1000, v[i99]/1000}')
  printf '  %-24s %10.3f %10.3f %11.3f %11.3f %12.3f %14.3f %8d\n' "$label" "$fp50" "$fp99" "$lp50" "$lp99" \
    "$(echo "$fp99 - $lp99" | bc -l)" "$pp99" "$n"
}
header_row() {
  printf '  %-24s %10s %10s %11s %11s %12s %14s %8s\n' "$1" "e2e P50" "e2e P99" "floor P50" "floor P99" "P99 - floor" "proc P99" "samples"
}
start_floor() {  # topic file -> pid in floor_pid
  tools/kafka_floor "${floor_options[@]}" --bootstrap "$boot" --topic "$1" --duration 8 --out "$2" > "$2.json" &
  floor_pid=$!
  while ! grep -q ready "$2.json" 2>/dev/null; do sleep 0.05; done
}
worker_pid() { sql -c "SELECT pid FROM sdp.flow_status WHERE flow = '$1'"; }
rss() {  # pid -> "VmRSS RssAnon RssShmem" in kB
  awk '/^VmRSS|^RssAnon|^RssShmem/ {printf "%s ", $2} END {print ""}' "/proc/$1/status"
}
now() { date +%s.%N; }
wait_read() {  # flow count -> prints the time when messages_read reached count
  local r deadline=$((SECONDS + 600))
  while :; do
    r=$(sql -c "SELECT CASE WHEN messages_read >= $2 THEN 'done' WHEN state = 'failed' THEN 'failed: ' || coalesce(last_error, '')
                  ELSE 'wait' END FROM sdp.flow_status WHERE flow = '$1'")
    [ "$r" = done ] && break
    if [ "$r" != wait ] || [ $SECONDS -ge $deadline ]; then
      echo "bench: flow $1 did not read $2 messages (${r:-no such flow}; $(sql -c "SELECT messages_read FROM sdp.flow_status WHERE flow = '$1'") read)" >&2
      exit 1
    fi
    sleep 0.05
  done
  now
}

out=bench/out; mkdir -p "$out"; report="$out/$(date -u +%Y%m%dT%H%M%SZ).txt"
{
echo "sdp_ext benchmark, $(date -u), $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), PostgreSQL $(sdp_as_postgres postgres --version | awk '{print $3}'), broker $broker_kind"
echo

if [ -n "${BENCH_ONLY_PAY:-}" ]; then TPUT_N=1000; TPUT2_N=1000; RATES=""; MEM_SECONDS=16; fi
# 1a. throughput, every row a new key: the flow and COPY write the same rows
make_flow tput tput positions_tput '2 seconds'
sleep 1
t0=$(now)
tools/flight_sim --bootstrap "$boot" --topic tput --aircraft "$TPUT_N" --count "$TPUT_N" --rate 0 --quiet > "$dir/sim1.json" &
t1=$(wait_read tput "$TPUT_N")
flow_eps=$(echo "$TPUT_N / ($t1 - $t0)" | bc -l)
rows=$(sql -c 'SELECT count(*) FROM positions_tput')
sql -c "SELECT sdp_stop_flow('tput')" >/dev/null
sql -c "COPY positions_tput TO '$dir/rows.csv' (FORMAT csv)"
sql -c 'TRUNCATE positions_tput'
sql -c 'CHECKPOINT'
c0=$(now); sql -c "COPY positions_tput FROM '$dir/rows.csv' (FORMAT csv)"; c1=$(now)
copy_eps=$(echo "$rows / ($c1 - $c0)" | bc -l)

# 1b. throughput, 2,000 aircraft reporting 150 times each (upsert collapses)
make_flow tput2 tput2 positions_tput2 '2 seconds'
sleep 1
t0=$(now)
tools/flight_sim --bootstrap "$boot" --topic tput2 --aircraft 2000 --count "$TPUT2_N" --rate 0 --quiet > "$dir/sim2.json" &
t1=$(wait_read tput2 "$TPUT2_N")
flow2_eps=$(echo "$TPUT2_N / ($t1 - $t0)" | bc -l)
sql -c "SELECT sdp_stop_flow('tput2')" >/dev/null

echo "Throughput (producer running concurrently; events/s at the sink)"
printf '  %-58s %12s\n' "case" "events/s"
printf '  %-58s %12.0f\n' "positions_flow, $TPUT_N new aircraft (upsert = insert)" "$flow_eps"
printf '  %-58s %12.0f\n' "COPY of the same $rows rows into the same table" "$copy_eps"
printf '  %-58s %12.2f\n' "ratio flow / COPY" "$(echo "$flow_eps / $copy_eps" | bc -l)"
printf '  %-58s %12.0f\n' "positions_flow, 2,000 aircraft x $((TPUT2_N / 2000)) reports (upserts)" "$flow2_eps"
echo

# 2. latency at fixed rates, beside the transport floor.  First let autovacuum's
# work on the throughput tables and the checkpoint of their WAL pass.  Each
# rate gets a fresh topic and a short window: the embedded broker finds a
# fetch offset by scanning the partition's log linearly, so its fetches slow
# down as a partition fills with small batches; a real Kafka broker does not.
sql -c 'VACUUM ANALYZE' -c 'CHECKPOINT'
sleep 2
echo "Latency of positions_flow (ms; e2eLatencyMs of its progress report; floor = bare librdkafka consumer, same messages, same window)"
header_row "flow, events/s"
for rate in $RATES; do
  make_flow "lat$rate" "lat$rate" "positions_lat$rate" "4 seconds"
  wait_running "lat$rate" 1
  start_floor "lat$rate" "$dir/floor$rate.txt"
  tools/flight_sim --bootstrap "$boot" --topic "lat$rate" --aircraft 2000 --rate "$rate" --linger-ms 1 \
    --duration 6 --quiet > /dev/null &
  sim=$!
  # the first report covers the flow's first 4 s, during which the producer runs
  while [ "$(sql -c "SELECT coalesce((sdp_flow_progress('lat$rate')->>'reportId')::int, 0) >= 1")" != t ]; do sleep 0.25; done
  p=$(sql -c "SELECT sdp_flow_progress('lat$rate')")
  wait "$sim"; wait "$floor_pid"
  sql -c "SELECT sdp_stop_flow('lat$rate')" >/dev/null
  report_row "positions_flow $rate/s" "$p" "$dir/floor$rate.txt"
done
echo

# 3. both flows at 10,000 events/s: the zone flow beside the enrich flow and the floor
echo "Both flows on one topic at 10,000 events/s (ms)"
header_row "flow"
make_flow both_positions both positions_both "4 seconds"
make_zone_flow both_zones both_positions zone_alerts_both "4 seconds"
wait_running 'both_%' 2
start_floor both "$dir/floorboth.txt"
tools/flight_sim --bootstrap "$boot" --topic both --aircraft 2000 --rate 10000 --linger-ms 1 --duration 6 --quiet > /dev/null &
sim=$!
while [ "$(sql -c "SELECT bool_and(coalesce((sdp_flow_progress(flow)->>'reportId')::int, 0) >= 1) FROM sdp.flow_status WHERE flow LIKE 'both_%'")" != t ]; do sleep 0.25; done
p1=$(sql -c "SELECT sdp_flow_progress('both_positions')")
p2=$(sql -c "SELECT sdp_flow_progress('both_zones')")
wait "$sim"; wait "$floor_pid"
report_row "positions_flow" "$p1" "$dir/floorboth.txt"
report_row "zone_congestion_flow" "$p2" "$dir/floorboth.txt"
sql -c "SELECT sdp_stop_flow('both_positions'), sdp_stop_flow('both_zones')" >/dev/null
echo

# 4. memory: both flows under a sustained load; worker RSS after warm-up and at the end
echo "Worker memory under sustained load (both flows, ${MEM_RATE} events/s for ${MEM_SECONDS} s; kB)"
make_flow mem_positions mem positions_mem "10 seconds"
make_zone_flow mem_zones mem_positions zone_alerts_mem "10 seconds"
wait_running 'mem_%' 2
tools/flight_sim --bootstrap "$boot" --topic mem --aircraft 5000 --rate "$MEM_RATE" --linger-ms 5 \
  --duration "$MEM_SECONDS" --quiet > /dev/null &
sim=$!
sleep 15
pp=$(worker_pid mem_positions); zp=$(worker_pid mem_zones)
read -r p_rss0 p_anon0 p_shm0 < <(rss "$pp"); read -r z_rss0 z_anon0 z_shm0 < <(rss "$zp")
wait "$sim"
read -r p_rss1 p_anon1 p_shm1 < <(rss "$pp"); read -r z_rss1 z_anon1 z_shm1 < <(rss "$zp")
lag=$(sql -c "SELECT string_agg(flow || ' lag ' || coalesce(lag, 0) || ', state ' || coalesce(state_bytes::text, '-') || ' B', '; ') FROM sdp.flow_status WHERE flow LIKE 'mem_%'")
printf '  %-24s %10s %10s %11s %11s %12s\n' "flow" "RSS @15s" "RSS @end" "anon @15s" "anon @end" "anon growth"
printf '  %-24s %10d %10d %11d %11d %12d\n' "positions_flow" "$p_rss0" "$p_rss1" "$p_anon0" "$p_anon1" $((p_anon1 - p_anon0))
printf '  %-24s %10d %10d %11d %11d %12d\n' "zone_congestion_flow" "$z_rss0" "$z_rss1" "$z_anon0" "$z_anon1" $((z_anon1 - z_anon0))
echo "  (RSS counts the shared buffers a worker has touched; anon is its own memory. At the end: $lag)"
sql -c "SELECT sdp_stop_flow('mem_positions'), sdp_stop_flow('mem_zones')" >/dev/null
echo

# 5. window_agg
echo "window_agg: 5 aggregations (count, sum, avg, ratio, approx_distinct) per merchant"
make_payments_flow pay pay pay_windows "1 minute"
wait_running pay 1
t0=$(now)
tools/payment_sim --bootstrap "$boot" --topic pay --merchants 10000 --count "$PAY_N" --rate 0 --event-time step:1 --quiet > /dev/null &
t1=$(wait_read pay "$PAY_N")
printf '  %-62s %10.0f\n' "events/s, 10,000 merchants, producer running concurrently" "$(echo "$PAY_N / ($t1 - $t0)" | bc -l)"
sql -c "SELECT sdp_stop_flow('pay')" >/dev/null

# live: event time = now; 1-second windows of every entity close at once each
# second; at two scales of entities (one after the other), pgbench reading by
# key during the larger one
cat > "$dir/read.sql" <<'PGB'
\set m random(1, 1000)
SELECT window_start, value, row_count FROM paylive1000_windows
 WHERE definition = 'rejection_ratio' AND entity = 'm' || lpad(:m::text, 5, '0')
 ORDER BY window_end DESC LIMIT 24;
PGB
for merchants in 20 100 1000; do
  make_payments_flow "paylive$merchants" "paylive$merchants" "paylive${merchants}_windows" "1 second"
  wait_running "paylive$merchants" 1
  tools/payment_sim --bootstrap "$boot" --topic "paylive$merchants" --merchants "$merchants" --rate 5000 \
    --duration "$PAY_SECONDS" --event-time now --linger-ms 1 --quiet > /dev/null &
  sim=$!
  if [ "$merchants" = 1000 ]; then
    sleep 3
    ( cd "$dir" && sdp_as_postgres pgbench -n -h "$dir" -p "$port" -U postgres -c 1 -T $((PAY_SECONDS - 5)) \
        -f "$dir/read.sql" --log --log-prefix="$dir/pgb" postgres > "$dir/pgbench.out" 2>&1 )
  fi
  wait "$sim"
  sleep 4
  sql -c "SELECT sdp_stop_flow('paylive$merchants')" >/dev/null
  read -r d50 d99 dn < <(sql -c "SELECT concat_ws(' ',
      round((percentile_cont(0.5) WITHIN GROUP (ORDER BY d))::numeric, 3),
      round((percentile_cont(0.99) WITHIN GROUP (ORDER BY d))::numeric, 3), count(*))
    FROM (SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - emitted_at) * 1000 AS d
            FROM paylive${merchants}_windows) s")
  printf '  %-62s %s / %s ms (%s rows)\n' "window finalized -> committed, $merchants merchants x 5, P50 / P99" "$d50" "$d99" "$dn"
done
read -r r50 r99 r999 rn < <(cat "$dir"/pgb* | awk '{print $3}' | sort -n | awk '{v[NR]=$1} END {
    printf "%.3f %.3f %.3f %d\n", v[int((NR*50+99)/100)]/1000, v[int((NR*99+99)/100)]/1000, v[int((NR*999+999)/1000)]/1000, NR}')
printf '  %-62s %s / %s / %s ms (%s reads)\n' "read last 24 windows of a merchant by key, P50 / P99 / P99.9" "$r50" "$r99" "$r999" "$rn"
echo

# 6. a sink flow at 10,000 events/s: the enrich flow (append) to a topic,
# with its input's Kafka timestamp in ms as one more column, src_ts
echo "A sink flow at 10,000 events/s (ms; to consumer = src_ts -> receipt by a read_committed consumer of the sink's topic;"
echo "  to commit = e2eLatencyMs of the flow's report, to the commit of its outbox rows; floor as in section 2)"
printf '  %-24s %10s %10s %11s %11s %12s %14s %8s\n' "flow" "P50" "P99" "floor P50" "floor P99" "P99 - floor" "to commit P99" "samples"
sql >/dev/null <<SQL
SELECT sdp_create_source('sinkin', '$boot', 'sinkin', '$source_options');
SELECT sdp_create_sink('sinkout', '$boot', 'sinkout');
SELECT sdp_create_flow('sink10000', source => 'sinkin', sink => 'sinkout',
  schema => 'icao24 text, callsign text, lat float8, lon float8, baro_alt float8, vert_rate float8,
             squawk text, velocity float8, heading float8, poller_ts timestamptz',
  transform => \$t\$ ${transform/AS updated_at/AS updated_at, (extract(epoch FROM i.kafka_timestamp) * 1000)::int8 AS src_ts} \$t\$,
  options => '{"mode": "append", "sink_key": "icao24", "progress_interval": "4 seconds"}');
SQL
wait_running sink10000 1
wait_relay sink10000
tools/kafka_floor "${floor_options[@]}" --bootstrap "$boot" --topic sinkin --duration 13 --out "$dir/floorsink.txt" > "$dir/floorsink.txt.json" &
floor_pid=$!
while ! grep -q ready "$dir/floorsink.txt.json" 2>/dev/null; do sleep 0.05; done
tools/kafka_floor "${floor_options[@]}" --bootstrap "$boot" --topic sinkout --duration 14 --payload-ts src_ts -X isolation.level=read_committed \
  --out "$dir/sinkcons.txt" > "$dir/sinkcons.json" &
cons=$!
while ! grep -q ready "$dir/sinkcons.json" 2>/dev/null; do sleep 0.05; done
t0=$(now)
tools/flight_sim --bootstrap "$boot" --topic sinkin --aircraft 2000 --rate 10000 --linger-ms 1 --duration 10 --quiet > /dev/null &
sim=$!
# the first report whose window starts after the producer did (the relay's start is not in it)
until [ "$(sql -c "SELECT coalesce(extract(epoch FROM (j->>'timestamp')::timestamptz) - (j->>'intervalSeconds')::float8 >= $t0, false)
                   FROM (SELECT sdp_flow_progress('sink10000') AS j) s")" = t ]; do sleep 0.1; done
p=$(sql -c "SELECT sdp_flow_progress('sink10000')")
wait "$sim"; wait "$floor_pid"; wait "$cons"
sql -c "SELECT sdp_stop_flow('sink10000')" >/dev/null
read -r cp99 n win_end win_len < <(sql -c "SELECT concat_ws(' ', j->'latencies'->'e2eLatencyMs'->>'P99',
    j->'latencies'->'e2eLatencyMs'->>'samples', extract(epoch FROM (j->>'timestamp')::timestamptz) * 1000,
    (j->>'intervalSeconds')::float8 * 1000) FROM (SELECT '$p'::jsonb AS j) s")
pct() {  # file: P50 P99 (ms) of the latencies (us) whose timestamp (ms) is in the report's window
  awk -v hi="$win_end" -v len="$win_len" '$1 >= hi - len && $1 <= hi {print $2}' "$1" | sort -n | awk '{v[NR]=$1}
    END {if (NR == 0) {print "nan nan"; exit} printf "%.3f %.3f\n", v[int((NR*50+99)/100)]/1000, v[int((NR*99+99)/100)]/1000}'
}
read -r sp50 sp99 < <(pct "$dir/sinkcons.txt"); read -r fp50 fp99 < <(pct "$dir/floorsink.txt")
printf '  %-24s %10.3f %10.3f %11.3f %11.3f %12.3f %14.3f %8d\n' "enrich flow to a sink" "$sp50" "$sp99" "$fp50" "$fp99" \
  "$(echo "$sp99 - $fp99" | bc -l)" "$cp99" "$n"
} | tee "$report"
echo
echo "saved in $report"
# a full run is the current figures of its broker (bench/README.md)
if [ "$quick" != "--quick" ] && [ "${BENCH_README:-1}" != 0 ]; then
  bash bench/current.sh "$report"
fi
