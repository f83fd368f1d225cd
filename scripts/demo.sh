#!/usr/bin/env bash
# scripts/demo.sh: the live demo of sdp_ext, from a fresh Debian 12 machine.
#
# Installs what is missing, builds and installs sdp_ext, then starts a
# throwaway PostgreSQL (as the postgres OS user, sdp_ext preloaded), a
# Kafka broker and the flight simulator, declares the flows of
# examples/flights.sql (zone congestion in two stages, through the topics
# zone-positions and zone-alerts), starts the live dashboard (tools/sdp_dashboard, a map
# of the aircraft and zones in the browser, URL printed), and shows the
# results refreshing live in the terminal, with each flow's latency percentiles.  Everything it started is stopped when it ends
# (after DEMO_SECONDS, default 60, or on Ctrl-C).
#
#   bash scripts/demo.sh              # run for 60 s
#   DEMO_SECONDS=600 bash scripts/demo.sh
#   DEMO_KEEP=1 bash scripts/demo.sh  # keep it running until Ctrl-C, with a psql hint
#   DEMO_HTTP=127.0.0.1:8080          # where the dashboard listens (the default)
#   DEMO_BROKER=kafka                 # the broker: kafka, Apache Kafka itself (scripts/kafka.sh,
#                                     # fetched from Maven Central once per machine; the default
#                                     # where Java 17 is installed), or embedded (tools/sdp_broker,
#                                     # librdkafka's mock cluster: no JVM, but it slows down as
#                                     # its partitions grow: e2e latency of seconds after minutes)
#   DEMO_WINDOW_SECONDS=300           # measure: every flow reports its latencies over windows of
#                                     # this length (progress_interval), and the demo ends with a
#                                     # table of each window's e2e P99 and the largest lag in it
#                                     # (the live view's latencies are then a window old)
#   DEMO_SOURCE_OPTIONS='{"fetch.wait.max.ms": "5"}'   # client properties for the demo's sources
#                                     # (default on Apache Kafka '{}', the extension's defaults:
#                                     # fetch.wait.max.ms 100, as the broker answers a fetch as soon
#                                     # as data arrives; on the embedded broker
#                                     # '{"fetch.wait.max.ms": "1"}', as librdkafka's mock answers
#                                     # an empty fetch only after the whole wait)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

seconds=${DEMO_SECONDS:-60}
aircraft=${DEMO_AIRCRAFT:-600}
port=${DEMO_PORT:-5488}
http=${DEMO_HTTP:-127.0.0.1:8080}
if [ -z "${DEMO_BROKER:-}" ]; then
  if command -v java >/dev/null; then broker=kafka; else broker=embedded; fi
else
  broker=$DEMO_BROKER
fi
case $broker in
  kafka|embedded) ;;
  *) sdp_log "DEMO_BROKER must be kafka or embedded, not '$broker'"; exit 2 ;;
esac

sdp_install_packages
if [ "$broker" = kafka ]; then
  command -v mvn >/dev/null || sdp_install_packages maven
  sdp_as_root bash scripts/kafka.sh fetch >/dev/null
fi
sdp_build_install

dir=$(mktemp -d /tmp/sdp_demo.XXXXXX)
chown postgres:postgres "$dir" 2>/dev/null || sdp_as_root chown postgres:postgres "$dir"
chmod 711 "$dir" 2>/dev/null || sdp_as_root chmod 711 "$dir"   # the dashboard reaches the socket
pg="$dir/pg"
kdir=''
pids=()

cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  [ -f "$pg/postmaster.pid" ] && sdp_as_postgres pg_ctl -D "$pg" -m fast stop >/dev/null 2>&1
  [ -n "$kdir" ] && { bash scripts/kafka.sh stop "$kdir"; rm -rf "$kdir"; }
  sdp_as_root rm -rf "$dir"
  sdp_log "demo stopped; nothing left running"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sdp_log "starting a throwaway PostgreSQL on port $port in $dir"
sdp_initdb "$pg" "$dir" "$port"
sdp_as_postgres pg_ctl -D "$pg" -l "$dir/postgres.log" -w start >/dev/null
psql_demo() { sdp_as_postgres psql -X -q -h "$dir" -p "$port" -U postgres -d postgres "$@"; }

topics=(raw-flights:4 zone-positions:4 zone-alerts:2)
if [ "$broker" = kafka ]; then
  sdp_log "starting Apache Kafka (a single-node KRaft broker, scripts/kafka.sh)"
  kdir=$(mktemp -d /tmp/sdp_demo_kafka.XXXXXX)
  bootstrap=$(bash scripts/kafka.sh start "$kdir" | sed -n 's/^KAFKA_PLAINTEXT=//p')
  for t in "${topics[@]}"; do
    tools/kafka_admin --bootstrap "$bootstrap" create "${t%%:*}" "${t##*:}" >/dev/null
  done
else
  sdp_log "starting the embedded Kafka broker"
  tools/sdp_broker "${topics[@]/#/--topic=}" --addr-file "$dir/broker.addr" --quiet > "$dir/broker.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$dir/broker.addr" ] && break; sleep 0.1; done
  bootstrap=$(cat "$dir/broker.addr")
fi

if [ -n "${DEMO_SOURCE_OPTIONS:-}" ]; then
  source_options=$DEMO_SOURCE_OPTIONS
elif [ "$broker" = kafka ]; then
  source_options='{}'
else
  source_options='{"fetch.wait.max.ms": "1"}'
fi
sdp_log "declaring the flows (examples/flights.sql, zone congestion in two stages through Kafka) against $bootstrap"
psql_demo -c 'CREATE EXTENSION sdp_ext' >/dev/null
psql_demo -v ON_ERROR_STOP=1 -v bootstrap="$bootstrap" -v two_stage=1 -v source_options="$source_options" \
  -f examples/flights.sql >/dev/null

window=${DEMO_WINDOW_SECONDS:-}
if [ -n "$window" ]; then
  sdp_log "every flow reports its latencies over ${window}-second windows (DEMO_WINDOW_SECONDS)"
  altered=$(psql_demo -At -v ON_ERROR_STOP=1 -c "SELECT now()" \
    -c "SELECT sdp_alter_flow(name, options => jsonb_build_object('progress_interval', '$window seconds')) FROM sdp.flows")
  altered=${altered%%$'\n'*}
  # the flows restart with it (their workers stop and start again): before the aircraft fly
  for _ in $(seq 300); do
    [ "$(psql_demo -At -c "SELECT count(*) = (SELECT count(*) FROM sdp.flows) FROM sdp.flow_status
                            WHERE state = 'running' AND started_at > '$altered'")" = t ] && break
    sleep 0.2
  done
fi

sdp_log "starting the dashboard"
tools/sdp_dashboard --listen "$http" --db "host=$dir port=$port dbname=postgres user=postgres" \
  > "$dir/dashboard.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q '^dashboard: http' "$dir/dashboard.log" && break; sleep 0.1; done
url=$(sed -n 's/^dashboard: \(http[^ ]*\).*/\1/p' "$dir/dashboard.log" | head -1)
if [ -n "$url" ]; then
  sdp_log "dashboard: open $url in a browser (the map of aircraft and zones, live)"
else
  sdp_log "the dashboard did not start (is $http in use? set DEMO_HTTP): $(tail -2 "$dir/dashboard.log")"
fi

sdp_log "flying $aircraft aircraft (each reports every second, 10x simulated speed) for $seconds s"
tools/flight_sim --bootstrap "$bootstrap" --topic raw-flights --aircraft "$aircraft" \
  --rate "$aircraft" --duration "$seconds" --time-scale 10 --emergency 0.002 --seed "$RANDOM" \
  --quiet > "$dir/flight_sim.out" 2>&1 &
sim=$!
pids+=($sim)

show() {
  psql_demo <<'SQL'
\pset footer off
SELECT now()::time(0) AS "time", count(*) AS aircraft,
       count(*) FILTER (WHERE flight_phase = 'climbing') AS climbing,
       count(*) FILTER (WHERE flight_phase = 'cruise') AS cruise,
       count(*) FILTER (WHERE flight_phase = 'descending') AS descending,
       count(*) FILTER (WHERE squawk_alert = 'emergency') AS emergencies
  FROM positions;
SELECT a.zone, a.aircraft_count, z.capacity, a.crowded, a.updated_at::time(3) AS updated
  FROM zone_alerts a JOIN zones z USING (zone) ORDER BY a.aircraft_count DESC, a.zone;
SELECT icao24, callsign, round(lat::numeric, 3) AS lat, round(lon::numeric, 3) AS lon,
       baro_alt, vert_rate, velocity, flight_phase, zone, squawk_alert
  FROM positions ORDER BY updated_at DESC, icao24 LIMIT 5;
SELECT flow, state, messages_read, rows_written, rows_dead_lettered, lag FROM sdp.flow_status;
SELECT flow, p->'inputRowsPerSecond' AS "in/s",
       p->'latencies'->'e2eLatencyMs'->>'P50' AS e2e_p50_ms,
       p->'latencies'->'e2eLatencyMs'->>'P99' AS e2e_p99_ms,
       p->'latencies'->'processingLatencyMs'->>'P99' AS processing_p99_ms
  FROM (SELECT name AS flow, sdp_flow_progress(name) AS p FROM sdp.flows) s;
SQL
}

end=$((SECONDS + seconds))
started=$SECONDS
while [ $SECONDS -lt $end ] && kill -0 "$sim" 2>/dev/null; do
  sleep 3
  printf '\n==== live results (%s s left) ====\n' $((end - SECONDS))
  show
  if [ -n "$window" ]; then
    # each window's report once it is there, and the lag now, tagged with the window it falls in
    psql_demo -At -F ' ' -c "SELECT 'lag', ($SECONDS - $started) / $window, flow, coalesce(lag, 0) FROM sdp.flow_status" >> "$dir/windows.txt"
    psql_demo -At -F ' ' -c "SELECT 'report', name, p->>'reportId', p->'latencies'->'e2eLatencyMs'->>'P99',
                                    p->'latencies'->'e2eLatencyMs'->>'samples'
                               FROM (SELECT name, sdp_flow_progress(name) AS p FROM sdp.flows) s
                              WHERE p->>'reportId' IS NOT NULL" >> "$dir/windows.txt"
  fi
done
if [ -n "$window" ] && [ -s "$dir/windows.txt" ]; then
  printf '\n==== e2e P99 (ms) of each %s-second window, and the largest lag in it (messages) ====\n' "$window"
  # report N covers window N (the first starts when the flows restarted for DEMO_WINDOW_SECONDS)
  awk '$1 == "lag" { w = $2 + 1; if ($4 > lag[$3, w]) lag[$3, w] = $4; flows[$3] = 1; if (w > last) last = w }
       $1 == "report" { p99[$2, $3] = $4; n[$2, $3] = $5; flows[$2] = 1 }
       END {
         for (f in flows) {
           printf "%-22s", f
           for (w = 1; w <= last; w++)
             if ((f, w) in p99) printf "  w%d %s ms (%s) lag %d", w, p99[f, w], n[f, w], lag[f, w]
           printf "\n"
         }
       }' "$dir/windows.txt"
fi
printf '\n==== final progress report of positions_flow ====\n'
psql_demo -At -c "SELECT jsonb_pretty(sdp_flow_progress('positions_flow'))"
printf '\n==== the live state of zone_congestion_flow (London) ====\n'
psql_demo -c "SELECT key, state, left(value::text, 110) AS value FROM sdp_flow_state('zone_congestion_flow') WHERE key = 'London TMA'"
if [ -n "${DEMO_KEEP:-}" ]; then
  sdp_log "still running; try: sudo -u postgres psql -h $dir -p $port -d postgres  (Ctrl-C here stops everything)"
  tools/flight_sim --bootstrap "$bootstrap" --topic raw-flights --aircraft "$aircraft" \
    --rate "$aircraft" --duration 86400 --time-scale 10 --quiet >/dev/null 2>&1 &
  pids+=($!)
  while true; do sleep 5; show; done
fi
