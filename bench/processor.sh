#!/usr/bin/env bash
# bench/processor.sh: a stateful processor written in PL/pgSQL beside the
# built-in operator that does the same in C, over the same input (issue 47).
#
#   builtin    active_count, the zone congestion flow of examples/flights.sql
#   processor  the ZoneCounter of examples/zone_counter.sql: the same per-zone
#              count, written with the state API in PL/pgSQL
#
# Both read aircraft positions (tools/flight_sim), join them to the zones of
# examples/flights.sql, and keep per zone a map aircraft -> last seen with
# one sweep timer.  Measured, side by side in one run, each case alternating
# builtin then processor (medians of RUNS):
#
#   drain      one worker drains a backlog of EVENTS positions (8 partitions:
#              the embedded broker keeps about 5 MiB per partition),
#              timed from its first message read to its last: events/s and
#              the worker's CPU per 1,000 events (user + system, /proc);
#              beside them COPY's reference: the backend's CPU per 1,000
#              rows to COPY the same positions (icao24, lat, lon, written
#              once by a stateless flow) into a plain table
#   rate R     positions produced at R events/s for RATE_SECONDS while the
#              flow runs: the worker's CPU per 1,000 events, and the e2e
#              latency P50/P99 of the flow's own progress report (Kafka
#              timestamp -> committed, sdp_flow_progress), at 1,000 and
#              10,000 events/s
#
# Usage: bash bench/processor.sh [EVENTS] [RUNS]   (default 100000, 3).
#        EVERYWHERE=1 adds a zone that holds the whole world, so that every
#        event reaches the operator (by default a share of the positions is
#        in one of the 8 zones, the others dropped by the transform's join).
#        RATES="1000 10000", RATE_SECONDS=20.  SDP_BENCH_BROKER=kafka runs
#        against Apache Kafka.  It installs the current tree into Debian's
#        PostgreSQL, starts its own server (port 5495) and broker, and
#        leaves nothing running.  The last line:
#          processor: CPU x<ratio> drain <events/s> P99@1k <ms> vs <ms>
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
. bench/server.sh

n=${1:-100000}; runs=${2:-3}
rates=${RATES:-1000 10000}
rate_seconds=${RATE_SECONDS:-20}
port=${BENCH_PORT:-5495}
sdp_install_packages bc
sdp_build_install
ticks=$(getconf CLK_TCK)

bench_server processor
bench_start
bench_broker pos:8 live:1
sdp_log "producing $n positions"
tools/flight_sim --bootstrap "$boot" --topic pos --aircraft 2000 --count "$n" --rate 0 --linger-ms 100 --quiet > /dev/null

sql -c 'CREATE EXTENSION sdp_ext'
sed -n '/^CREATE TABLE zones/,/^CREATE TABLE positions/p' examples/flights.sql | sed '$d' | sql >/dev/null
[ "${EVERYWHERE:-}" = 1 ] && sql -c "INSERT INTO zones VALUES ('Everywhere', -90, 90, -180, 180, 100000)" >/dev/null
sdp_log "$(sql -c "SELECT count(*) FROM zones") zones"
sql >/dev/null <<SQL
SELECT sdp_create_source('pos', '$boot', 'pos', '{"starting_offsets": "earliest"}'::jsonb || '$source_options');
SELECT sdp_create_source('live', '$boot', 'live', '{"starting_offsets": "latest"}'::jsonb || '$source_options');
SQL
# the example's table, type and functions (its flow is declared per case below)
sed '/^SELECT sdp_create_flow/,$d' examples/zone_counter.sql | sql >/dev/null
sql -c 'CREATE TABLE zone_alerts (LIKE zone_counts INCLUDING ALL)' >/dev/null

transform='$t$SELECT z.zone, i.icao24, z.capacity FROM input i JOIN zones z ON i.lat BETWEEN z.min_lat AND z.max_lat AND i.lon BETWEEN z.min_lon AND z.max_lon$t$'
# make KIND SOURCE: the flow named KIND, on SOURCE, into its table (emptied)
make() {
  local kind=$1 src=$2
  if [ "$kind" = builtin ]; then
    sql >/dev/null <<SQL
TRUNCATE zone_alerts;
SELECT sdp_create_flow('builtin', source => '$src', target => 'zone_alerts', schema => 'icao24 text, lat float8, lon float8',
  transform => $transform, operator => 'active_count',
  options => '{"key": "zone", "member": "icao24", "ttl": "30 seconds", "capacity_column": "capacity",
               "count_column": "aircraft_count", "alert_column": "crowded", "time_column": "updated_at",
               "progress_interval": "5 seconds"}');
SQL
  else
    sql >/dev/null <<SQL
TRUNCATE zone_counts;
SELECT sdp_create_flow('processor', source => '$src', target => 'zone_counts', schema => 'icao24 text, lat float8, lon float8',
  transform => $transform, operator => 'processor',
  options => '{"key": "zone", "handle_rows": "zone_counter_rows", "handle_timer": "zone_counter_timer",
               "state": {"aircraft": {"map": ["text", "timestamptz"]}, "sweep_at": {"value": "timestamptz"},
                         "capacity": {"value": "int"}, "last_count": {"value": "bigint"}},
               "progress_interval": "5 seconds"}');
SQL
  fi
}
worker_cpu() { awk '{print $14 + $15}' "/proc/$(sql -c "SELECT pid FROM sdp.flow_workers WHERE flow = '$1'")/stat"; }

# drain KIND: prints "events/s us-per-event"
drain() {
  local kind=$1 t0 t1 c0 c1
  make "$kind" pos
  until [ "$(sql -c "SELECT coalesce(messages_read, 0) > 0 FROM sdp.flow_status WHERE flow = '$kind'")" = t ]; do sleep 0.01; done
  t0=$(date +%s.%N); c0=$(worker_cpu "$kind")
  until [ "$(sql -c "SELECT coalesce(messages_read, 0) >= $n FROM sdp.flow_status WHERE flow = '$kind'")" = t ]; do
    [ "$(sql -c "SELECT state FROM sdp.flow_status WHERE flow = '$kind'")" = failed ] && { echo "flow $kind failed" >&2; kill $$; exit 1; }
    [ "$(sql -c "SELECT lag = 0 AND messages_read < $n FROM sdp.flow_status WHERE flow = '$kind'")" = t ] &&
      [ "$(sql -c "SELECT sum(next_offset) >= $n FROM sdp.offsets o JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = '$kind'")" = t ] &&
      { echo "flow $kind started past offset 0: the broker deleted messages (retention); use fewer events" >&2; kill $$; exit 1; }
    sleep 0.01
  done
  t1=$(date +%s.%N); c1=$(worker_cpu "$kind")
  sql -c "SELECT sdp_drop_flow('$kind')" >/dev/null
  until [ "$(sql -c "SELECT count(*) FROM sdp.flow_workers")" = 0 ]; do sleep 0.1; done
  echo "$(echo "$n / ($t1 - $t0)" | bc -l) $(echo "($c1 - $c0) * 1000000 / $ticks / $n" | bc -l)"
}

# at_rate KIND RATE: prints "us-per-event p50 p99"
at_rate() {
  local kind=$1 rate=$2 c0 c1 sent
  make "$kind" live
  wait_running "$kind"
  sleep 1
  c0=$(worker_cpu "$kind")
  tools/flight_sim --bootstrap "$boot" --topic live --aircraft 2000 --rate "$rate" --duration "$rate_seconds" \
    --linger-ms 1 --quiet > "$dir/sim.json"
  sent=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["delivered"])' "$dir/sim.json")
  until [ "$(sql -c "SELECT lag = 0 FROM sdp.flow_status WHERE flow = '$kind'")" = t ]; do sleep 0.05; done
  c1=$(worker_cpu "$kind")
  # the progress report of the last 5 seconds of the steady rate
  local p
  p=$(sql -c "SELECT (sdp_flow_progress('$kind')->'latencies'->'e2eLatencyMs'->>'P50') || ' ' || (sdp_flow_progress('$kind')->'latencies'->'e2eLatencyMs'->>'P99')")
  sql -c "SELECT sdp_drop_flow('$kind')" >/dev/null
  until [ "$(sql -c "SELECT count(*) FROM sdp.flow_workers")" = 0 ]; do sleep 0.1; done
  echo "$(echo "($c1 - $c0) * 1000000 / $ticks / $sent" | bc -l) $p"
}

# COPY's reference: the positions, as the flows read them, in a plain table
sql >/dev/null <<SQL
CREATE TABLE pos_rows (icao24 text, lat float8, lon float8);
SELECT sdp_create_flow('pos_rows', source => 'pos', target => 'pos_rows', schema => 'icao24 text, lat float8, lon float8');
SQL
until [ "$(sql -c "SELECT count(*) >= $n FROM pos_rows")" = t ]; do sleep 0.1; done
sql -c "SELECT sdp_drop_flow('pos_rows')" >/dev/null
until [ "$(sql -c "SELECT count(*) FROM sdp.flow_workers")" = 0 ]; do sleep 0.1; done

declare -A d_rate d_cpu r_cpu r_p50 r_p99
copy_ms=""
for i in $(seq "$runs"); do
  for kind in builtin processor; do
    read -r r c <<<"$(drain "$kind")"
    d_rate[$kind]="${d_rate[$kind]:-} $r"; d_cpu[$kind]="${d_cpu[$kind]:-} $c"
    sdp_log "drain run $i $kind: $(printf '%.0f events/s, %.2f ms per 1,000 events' "$r" "$c")"
  done
  c=$(copy_cpu pos_rows | awk '{print $1}')
  copy_ms="$copy_ms $c"
  sdp_log "drain run $i COPY: $(printf '%.2f ms per 1,000 rows' "$c")"
done
for rate in $rates; do
  for i in $(seq "$runs"); do
    for kind in builtin processor; do
      read -r c p50 p99 <<<"$(at_rate "$kind" "$rate")"
      r_cpu[$kind.$rate]="${r_cpu[$kind.$rate]:-} $c"; r_p50[$kind.$rate]="${r_p50[$kind.$rate]:-} $p50"
      r_p99[$kind.$rate]="${r_p99[$kind.$rate]:-} $p99"
      sdp_log "$rate events/s run $i $kind: $(printf '%.2f ms per 1,000 events, P50 %s ms, P99 %s ms' "$c" "$p50" "$p99")"
    done
  done
done

printf '\n%-10s %12s %10s' kind drain/s ms/1k
for rate in $rates; do printf ' | %8s %7s %7s' "ms/1k@$rate" P50 P99; done
printf '\n'
for kind in builtin processor; do
  printf '%-10s %12.0f %10.3f' "$kind" "$(echo "${d_rate[$kind]}" | median)" "$(echo "${d_cpu[$kind]}" | median)"
  for rate in $rates; do
    printf ' | %8.3f %7.2f %7.2f' "$(echo "${r_cpu[$kind.$rate]}" | median)" "$(echo "${r_p50[$kind.$rate]}" | median)" \
      "$(echo "${r_p99[$kind.$rate]}" | median)"
  done
  printf '\n'
done
printf '%-10s %12s %10.3f\n' COPY - "$(echo "$copy_ms" | median)"
ratio=$(echo "$(echo "${d_cpu[processor]}" | median) / $(echo "${d_cpu[builtin]}" | median)" | bc -l)
printf 'drain CPU per event: builtin x%.2f COPY, processor x%.2f COPY\n' \
  "$(echo "$(echo "${d_cpu[builtin]}" | median) / $(echo "$copy_ms" | median)" | bc -l)" \
  "$(echo "$(echo "${d_cpu[processor]}" | median) / $(echo "$copy_ms" | median)" | bc -l)"
first=${rates%% *}
printf 'processor: CPU x%.2f drain %.0f P99@%s %s vs %s\n' "$ratio" "$(echo "${d_rate[processor]}" | median)" "$first" \
  "$(echo "${r_p99[processor.$first]}" | median)" "$(echo "${r_p99[builtin.$first]}" | median)"
