#!/usr/bin/env bash
# bench/peers.sh: sdp_ext beside the systems its users would deploy instead,
# measured in one run on one Apache Kafka broker and one PostgreSQL: the same
# topic of aircraft positions (tools/flight_sim's JSON), the same target
# table and the same enrich (examples/flights.sql's flight_phase,
# squawk_alert and zone lookup), through each peer:
#
#   sdp_ext        a flow (append, and upsert by icao24; and plain, without
#                  transform: the declared fields into a table of them)
#   python         bench/peers/glue.py: confluent-kafka and psycopg 3, COPY
#                  (append) or executemany INSERT ... ON CONFLICT (upsert) per
#                  batch, the offsets stored in a table in the same
#                  transaction (the exactly-once glue a team would write)
#   kafka_streams  bench/peers/streams: a Kafka Streams 4.4 application (one
#                  stream thread) doing the enrich in Java and writing through
#                  JDBC batches (pgjdbc, reWriteBatchedInserts) of 1,000 rows
#                  or 100 ms per task, committing its offsets after each
#                  batch's PostgreSQL commit (at least once: Kafka Streams'
#                  exactly-once covers Kafka outputs, not a database)
#   connect_jdbc   Kafka Connect 4.3 standalone with Debezium's JDBC sink
#                  connector (insert, or upsert by the icao24 of the value), reading a
#                  copy of the topic in Connect's JSON with schema (a JDBC sink
#                  needs a schema), the enrich a trigger on its table; offsets
#                  committed every 60 s (Connect's default)
#   flink          bench/peers/flink: a Flink 1.20 DataStream job on a local
#                  MiniCluster (one JVM, parallelism 1): KafkaSource, the
#                  enrich in Java, Flink's JDBC sink (1,000 rows or 100 ms),
#                  checkpoints every 5 s (at least once: exactly-once needs XA)
#
# For each peer and mode:
#   drain      a backlog of EVENTS messages (each a new aircraft) produced
#              before the peer starts; the peer starts while a session holds
#              its table in SHARE mode, so that its start-up (a JVM's too) is
#              over when the lock goes and the measure begins; the rate from
#              its first commit to its last (track_commit_timestamp); CPU
#              (user + system, /proc) of every process of the peer and of the
#              PostgreSQL backends it writes through, from the lock's end to
#              the last row, per 1,000 events; beside it COPY of the same rows
#              into the same table, emptied (CPU per row, wall rate)
#   latency    (append) e2e from the producer's observation time in the
#              payload (poller_ts, which flight_sim takes when it hands the
#              message over; its Kafka timestamp too) to the row's commit
#              time, P50 and P99 over every row, at 1,000 and 10,000 events/s
#              (sdp_ext also at 50,000, its P99 in the table);
#              beside it the transport floor (tools/kafka_floor, a bare
#              consumer of the same messages)
#   kill       (append) KILL_EVENTS messages produced at 5,000 a second
#              while the peer runs; the peer is SIGKILLed when a third of
#              them are in the table, started again, and writes the rest:
#              rows duplicated and lost (by seq)
#
# It prints one table, writes it with a chart (events per CPU-second and P99
# side by side; gnuplot) to bench/out/peers-<UTC time>.{txt,png}, and ends
# with one line:
#   peers: NAME EVENTS_PER_CPU_S P99_MS DUPLICATES; ...
# (append drain, P99 at 10,000 events/s, duplicates after the SIGKILL).
#
# Usage: bash bench/peers.sh [--quick]
#   full:    300,000 events to drain, 20 s per latency rate, 60,000 for the kill
#   --quick:  50,000, 8 s, 20,000
#   PEERS="sdp_ext python" (default: every peer built)
#   PEERS_EVENTS=N     drain N events instead (the kill and latency sizes stay)
#   PEERS_PERF=DIR     perf record -g of each drain's measured processes (the
#                      peer's and its backends), from the lock's end to the
#                      last row, into DIR/<peer>.<mode>.data
#   PEERS_STEPS="drain latency kill"  the steps to run (default all three; a
#                      step left out prints "-" in the table)
#   PEERS_AB="A.so B.so"  before and after a change of the hot path: sdp_ext's
#                      drains made PEERS_AB_ROUNDS times (default 3) with each
#                      build, alternating (the server restarted with each),
#                      each beside its own COPY; one line per build with the
#                      medians, then the usual run with the tree's build
# It installs what is missing, builds and installs sdp_ext into Debian's
# PostgreSQL 15, fetches Apache Kafka (scripts/kafka.sh), starts its own server
# (port 5495, TCP on 127.0.0.1 for the JVM peers) and broker, and leaves
# nothing running.  Nothing is asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
. bench/server.sh

quick=0
[ "${1:-}" = --quick ] && quick=1
if [ $quick = 1 ]; then n=50000; lat_seconds=8; kill_n=20000; else n=300000; lat_seconds=20; kill_n=60000; fi
n=${PEERS_EVENTS:-$n}
steps=" ${PEERS_STEPS:-drain latency kill} "
peers=${PEERS:-sdp_ext python connect_jdbc kafka_streams flink}
partitions=8
port=${BENCH_PORT:-5495}
export SDP_BENCH_BROKER=kafka

sdp_install_packages bc gnuplot-nox python3-venv
command -v java >/dev/null || sdp_install_packages openjdk-17-jre-headless
command -v mvn >/dev/null || sdp_install_packages maven
sdp_build_install
ticks=$(getconf CLK_TCK)
started=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p bench/out
out=bench/out/peers-$started

# the Python peer's environment: confluent-kafka and psycopg 3, once per machine
pyenv=/var/cache/sdp_ext/peers-python
py_requirements='confluent-kafka==2.16.1 psycopg[binary]==3.3.9'
if [[ " $peers " == *" python "* || " $peers " == *" connect_jdbc "* ]] && [ "$(cat "$pyenv/.sdp-built" 2>/dev/null)" != "$py_requirements" ]; then
  sdp_log "building the Python peer's environment in $pyenv (once per machine)"
  sdp_as_root rm -rf "$pyenv"
  sdp_as_root /usr/bin/python3 -m venv "$pyenv"
  # shellcheck disable=SC2086  # the list is split on purpose
  sdp_as_root "$pyenv/bin/pip" install -q --disable-pip-version-check $py_requirements >&2
  echo "$py_requirements" | sdp_as_root tee "$pyenv/.sdp-built" >/dev/null
fi

if [[ " $peers " == *" connect_jdbc "* ]]; then
  sdp_as_root bash scripts/connect.sh fetch > /dev/null
  connect_plugins=$(sdp_as_root bash scripts/connect.sh fetch-jdbc-sink)
fi
for p in kafka_streams:streams flink:flink; do
  if [[ " $peers " == *" ${p%%:*} "* ]]; then
    sdp_log "building the ${p%%:*} peer (bench/peers/${p#*:})"
    mvn -q -B -f "bench/peers/${p#*:}/pom.xml" package dependency:copy-dependencies -DoutputDirectory=target/lib >&2
  fi
done

bench_server peers "track_commit_timestamp = on
listen_addresses = '127.0.0.1'
max_connections = 100"
echo "host all all 127.0.0.1/32 trust" | sdp_as_root tee -a "$dir/pg/pg_hba.conf" >/dev/null
bench_start
sql -c 'CREATE EXTENSION sdp_ext'
sed -n '/^CREATE TABLE zones/,/^-- The latest position/p' examples/flights.sql | sed '$d' | sql >/dev/null
# the enrich as a trigger, for the peer that has no logic of its own (connect_jdbc)
sql >/dev/null <<'SQL'
CREATE FUNCTION peers_enrich() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.flight_phase := CASE WHEN NEW.vert_rate > 500 THEN 'climbing' WHEN NEW.vert_rate < -500 THEN 'descending'
                           WHEN NEW.baro_alt > 30000 THEN 'cruise' ELSE 'en_route' END;
  NEW.squawk_alert := CASE WHEN NEW.squawk IN ('7500', '7600', '7700') THEN 'emergency' END;
  NEW.zone := (SELECT zone FROM zones z WHERE NEW.lat BETWEEN z.min_lat AND z.max_lat
                 AND NEW.lon BETWEEN z.min_lon AND z.max_lon ORDER BY zone LIMIT 1);
  NEW.updated_at := now();
  RETURN NEW;
END $$;
SQL

topics=(backlog:$partitions)
for p in $peers; do topics+=("live_$p:$partitions" "kill_$p:$partitions"); done
[[ " $peers " == *" connect_jdbc "* ]] &&
  topics+=("backlog_connect:$partitions" "live_connect_jdbc_connect:$partitions" "kill_connect_jdbc_connect:$partitions")
bench_broker "${topics[@]}"
sdp_log "producing the backlog: $n positions, each a new aircraft"
tools/flight_sim --bootstrap "$boot" --topic backlog --aircraft "$n" --count "$n" --rate 0 --linger-ms 100 --quiet > /dev/null

# the target: positions of examples/flights.sql, with the message's seq (to
# count duplicates and gaps), updated_at set by the writer's transaction
columns='seq bigint, icao24 text, callsign text, lat float8, lon float8, baro_alt float8, vert_rate float8,
  squawk text, velocity float8, heading float8, poller_ts timestamptz, flight_phase text, squawk_alert text,
  zone text, updated_at timestamptz DEFAULT now()'
make_table() {  # name append|upsert|plain (plain: the input's columns only, for a flow without transform)
  local cols=$columns
  [ "$2" = plain ] && cols=$schema
  sql -c "SET client_min_messages = warning; DROP TABLE IF EXISTS $1; CREATE TABLE $1 ($cols$([ "$2" = upsert ] && echo ', PRIMARY KEY (icao24)'))"
}
# the drain's modes of a peer: sdp_ext also without transform (plain: decode and write alone)
modes_of() { if [ "$1" = sdp_ext ]; then echo append upsert plain; else echo append upsert; fi; }

# ---- the peers: start TOPIC TABLE MODE NAME; pids NAME (to measure); kill NAME; stop NAME

# sdp_ext: the example's transform with seq
schema='seq bigint, icao24 text, callsign text, lat float8, lon float8, baro_alt float8, vert_rate float8,
  squawk text, velocity float8, heading float8, poller_ts timestamptz'
transform=$(sed -n '/^  transform => \$\$$/,/\$\$,$/p' examples/flights.sql | sed '1s/^  transform => \$\$//; $s/\$\$,$//' |
            sed 's/SELECT i.icao24,/SELECT i.seq, i.icao24,/')
sdp_ext_start() {
  if [ "${locked:-0}" = 1 ]; then
    # declared (stopped) before its table was locked: sdp_create_flow checks
    # the table for writing; it runs once the lock goes
    sql -c "SELECT sdp_start_flow('$4')" >/dev/null
    return
  fi
  sdp_ext_declare "$@"
  wait_running "$4"
}
# (one transaction: the launcher never sees it wanted)
sdp_ext_prepare() { sdp_ext_declare "$@" "SELECT sdp_stop_flow('$4');"; }
sdp_ext_declare() {
  sql >/dev/null <<SQL
BEGIN;
SELECT sdp_create_source('$4', '$boot', '$1', '{"starting_offsets": "earliest"}');
$(if [ "$3" = plain ]; then
  echo "SELECT sdp_create_flow('$4', source => '$4', target => '$2', schema => '$schema', options => '{\"mode\": \"append\"}');"
else
  echo "SELECT sdp_create_flow('$4', source => '$4', target => '$2', schema => '$schema',
  transform => \$t\$ ${transform//positions/$2} \$t\$, options => '{\"mode\": \"$3\"}');"
fi)
${5:-}
COMMIT;
SQL
}
sdp_ext_pids() { sql -c "SELECT pid FROM sdp.flow_workers WHERE flow = '$1' AND pid IS NOT NULL"; }
sdp_ext_kill() { kill -KILL $(sdp_ext_pids "$1"); }
sdp_ext_restart() { :; }   # the postmaster restarts, and the launcher the flow
sdp_ext_stop() { sql -c "SELECT sdp_drop_flow('$1'); SELECT sdp_drop_source('$1')" >/dev/null; }

# python: bench/peers/glue.py, its own consumer group per run
declare -A py_pid py_args
python_start() {
  py_args[$4]="--bootstrap $boot --topic $1 --table $2 --mode $3 --group $4
    --dsn postgresql://postgres@/postgres?host=$dir&port=$port&application_name=$4"
  python_launch "$4"
}
python_launch() {
  # shellcheck disable=SC2086
  "$pyenv/bin/python" bench/peers/glue.py ${py_args[$1]} >> "$dir/$1.log" 2>&1 &
  py_pid[$1]=$!
  pids+=(${py_pid[$1]})
  wait_app "$1" "${py_pid[$1]}"
}
python_pids() { echo "${py_pid[$1]}"; app_backends "$1"; }
python_kill() { kill -KILL "${py_pid[$1]}"; wait "${py_pid[$1]}" 2>/dev/null || true; }
python_restart() { python_launch "$1"; }
python_stop() { kill -TERM "${py_pid[$1]}" 2>/dev/null || true; wait "${py_pid[$1]}" 2>/dev/null || true; }

# kafka_streams: bench/peers/streams (StreamsPeer), one stream thread, its
# application id (and consumer group) per run
declare -A st_pid st_args
kafka_streams_start() {
  mkdir -p "$dir/$4.state"
  st_args[$4]="$boot $1 jdbc:postgresql://127.0.0.1:$port/postgres?user=postgres&ApplicationName=$4&reWriteBatchedInserts=true $2 $3 $4 $dir/$4.state"
  kafka_streams_launch "$4"
}
kafka_streams_launch() {
  # shellcheck disable=SC2086
  java -Xms128m -Xmx512m -cp "bench/peers/streams/target/peers-streams-1.jar:bench/peers/streams/target/lib/*" \
    sdp.peers.StreamsPeer ${st_args[$1]} >> "$dir/$1.log" 2>&1 &
  st_pid[$1]=$!
  pids+=(${st_pid[$1]})
  wait_app "$1" "${st_pid[$1]}"
}
kafka_streams_pids() { echo "${st_pid[$1]}"; app_backends "$1"; }
kafka_streams_kill() { kill -KILL "${st_pid[$1]}"; wait "${st_pid[$1]}" 2>/dev/null || true; }
kafka_streams_restart() { kafka_streams_launch "$1"; }
kafka_streams_stop() { kill -TERM "${st_pid[$1]}" 2>/dev/null || true; wait "${st_pid[$1]}" 2>/dev/null || true; }

# connect_jdbc: Kafka Connect 4.3 standalone (scripts/connect.sh) with
# Debezium's JDBC sink connector, a worker per run; it reads a copy of the
# topic with Connect's JSON schema (bench/peers/connect_json.py: a JDBC sink
# needs one), and the enrich is a BEFORE INSERT OR UPDATE trigger on its table
# (a sink connector has no lookup of its own).  Offsets are committed every
# offset.flush.interval.ms, Connect's default 60 s (at least once).
declare -A cj_relay
connect_jdbc_topic() {  # the copy of TOPIC with Connect's schema, made (or followed) now
  case $1 in
    live_*|kill_*) "$pyenv/bin/python" bench/peers/connect_json.py --bootstrap "$boot" --from "$1" --to "$1_connect" --follow \
              >> "$dir/connect_json.log" 2>&1 &
            cj_relay[$2]=$!; pids+=(${cj_relay[$2]}); sleep 3 ;;
    backlog) [ -f "$dir/backlog_connect.done" ] ||
               { "$pyenv/bin/python" bench/peers/connect_json.py --bootstrap "$boot" --from backlog --to backlog_connect \
                   >> "$dir/connect_json.log" 2>&1 && touch "$dir/backlog_connect.done"; } ;;
    *) "$pyenv/bin/python" bench/peers/connect_json.py --bootstrap "$boot" --from "$1" --to "$1_connect" >> "$dir/connect_json.log" 2>&1 ;;
  esac
}
connect_jdbc_floor_topic() { echo "live_connect_jdbc_connect"; }
# the topic's copy and the trigger, before a drain locks the table
connect_jdbc_prepare() {
  connect_jdbc_topic "$1" "$4"
  sql -c "CREATE TRIGGER enrich BEFORE INSERT OR UPDATE ON $2 FOR EACH ROW EXECUTE FUNCTION peers_enrich()" >/dev/null
}
connect_jdbc_start() {
  [ "${locked:-0}" = 1 ] || connect_jdbc_prepare "$@"
  mkdir -p "$dir/$4.connect"
  SDP_CONNECT_FLUSH_MS=60000 SDP_CONNECT_HEAP=512m bash scripts/connect.sh start "$dir/$4.connect" --bootstrap "$boot" \
    --plugin-path "$connect_plugins" --exit-with $$ > /dev/null
  local pk=none
  [ "$3" = upsert ] && pk=record_value
  cat > "$dir/$4.json" <<JSON
{"name": "$4", "config": {
  "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "tasks.max": "1",
  "topics": "$1_connect",
  "connection.url": "jdbc:postgresql://127.0.0.1:$port/postgres?ApplicationName=$4",
  "connection.username": "postgres", "connection.password": "",
  "insert.mode": "$([ "$3" = upsert ] && echo upsert || echo insert)",
  "primary.key.mode": "$pk", "primary.key.fields": "icao24",
  "schema.evolution": "none", "collection.name.format": "$2", "use.time.zone": "UTC",
  "key.converter": "org.apache.kafka.connect.storage.StringConverter",
  "value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "true",
  "consumer.override.auto.offset.reset": "earliest"}}
JSON
  bash scripts/connect.sh add "$dir/$4.connect" "$dir/$4.json" > /dev/null
  wait_app "$4" "$(sed -n 's/^CONNECT_PID=//p' "$dir/$4.connect/connect.env")"
}
connect_jdbc_pids() { sed -n 's/^CONNECT_PID=//p' "$dir/$1.connect/connect.env"; app_backends "$1"; }
connect_jdbc_kill() { bash scripts/connect.sh kill "$dir/$1.connect"; }
connect_jdbc_restart() {
  SDP_CONNECT_FLUSH_MS=60000 SDP_CONNECT_HEAP=512m bash scripts/connect.sh start "$dir/$1.connect" --bootstrap "$boot" \
    --plugin-path "$connect_plugins" --exit-with $$ > /dev/null
  wait_app "$1" "$(sed -n 's/^CONNECT_PID=//p' "$dir/$1.connect/connect.env")"
}
connect_jdbc_stop() {
  bash scripts/connect.sh stop "$dir/$1.connect" || true
  [ -n "${cj_relay[$1]:-}" ] && { kill "${cj_relay[$1]}" 2>/dev/null; wait "${cj_relay[$1]}" 2>/dev/null || true; }
  return 0
}

# flink: bench/peers/flink (FlinkPeer), a DataStream job on a local
# MiniCluster in one JVM, parallelism 1, checkpoints every 5 s, its consumer
# group per run
declare -A fl_pid fl_args
flink_start() {
  fl_args[$4]="$boot $1 jdbc:postgresql://127.0.0.1:$port/postgres?user=postgres&ApplicationName=$4 $2 $3 $4"
  flink_launch "$4"
}
flink_launch() {
  local opens=() m
  for m in java.util java.lang java.lang.reflect java.io java.net java.nio java.text java.time \
           java.util.concurrent java.util.concurrent.atomic java.util.concurrent.locks sun.nio.ch; do
    opens+=(--add-opens "java.base/$m=ALL-UNNAMED")
  done
  # shellcheck disable=SC2086
  java -Xms256m -Xmx1g -Duser.timezone=UTC "${opens[@]}" -cp "bench/peers/flink/target/peers-flink-1.jar:bench/peers/flink/target/lib/*" \
    sdp.peers.FlinkPeer ${fl_args[$1]} >> "$dir/$1.log" 2>&1 &
  fl_pid[$1]=$!
  pids+=(${fl_pid[$1]})
  wait_app "$1" "${fl_pid[$1]}"
}
flink_pids() { echo "${fl_pid[$1]}"; app_backends "$1"; }
flink_kill() { kill -KILL "${fl_pid[$1]}"; wait "${fl_pid[$1]}" 2>/dev/null || true; }
flink_restart() { flink_launch "$1"; }
flink_stop() { kill -TERM "${fl_pid[$1]}" 2>/dev/null || true; wait "${fl_pid[$1]}" 2>/dev/null || true; }

# app_backends NAME: the PostgreSQL backends of the connections named NAME
app_backends() { sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = '$1'"; }
# wait_app NAME PID: until process PID has a connection named NAME (it has
# joined its group and been given partitions), then 2 s more for the rest
wait_app() {
  local i
  for i in $(seq 1200); do
    [ "$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$1'")" -gt 0 ] && { sleep 2; return 0; }
    kill -0 "$2" 2>/dev/null || { tail -20 "$dir/$1.log" >&2; sdp_log "$1 exited while starting"; exit 1; }
    sleep 0.1
  done
  sdp_log "$1 made no connection in 120 s (log: $dir/$1.log)"; exit 1
}

# ---- measures

cpu_of() {  # pids...: user + system ticks of those processes (all their threads)
  local t=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo $t
}

count_of() { sql -c "SELECT count(*) FROM $1"; }

# drain PEER MODE: prints "rate cpu_us_per_event copy_us_per_row copy_rate".
# The peer starts while a session holds its table locked: it reads its first
# batch and waits to write it, and its start-up (a JVM's too) is over when
# the lock goes and the measure starts.
drain() {
  local peer=$1 mode=$2 name=${1}_drain_$2 table=${1}_$2 c0 c1 secs ps locker
  make_table "$table" "$mode"
  if declare -F "${peer}_prepare" >/dev/null; then "${peer}_prepare" backlog "$table" "$mode" "$name"; fi
  sql -c "SET application_name = 'bench_lock'; BEGIN; LOCK TABLE $table IN SHARE MODE; SELECT pg_sleep(100000)" >/dev/null 2>&1 &
  locker=$!
  until [ "$(sql -c "SELECT count(*) FROM pg_locks WHERE relation = '$table'::regclass AND granted")" -gt 0 ]; do sleep 0.05; done
  locked=1 "${peer}_start" backlog "$table" "$mode" "$name"
  until [ "$(sql -c "SELECT count(*) FROM pg_locks WHERE relation = '$table'::regclass AND NOT granted")" -gt 0 ]; do sleep 0.1; done
  sleep 3
  ps=$("${peer}_pids" "$name")
  # shellcheck disable=SC2086
  c0=$(cpu_of $ps)
  local perf=
  if [ -n "${PEERS_PERF:-}" ]; then
    mkdir -p "$PEERS_PERF"
    perf record -g -o "$PEERS_PERF/$peer.$mode.data" -p "$(echo $ps | tr ' ' ,)" > /dev/null 2>&1 &
    perf=$!
    sleep 0.5
  fi
  sql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'bench_lock'" >/dev/null
  wait "$locker" 2>/dev/null || true
  until [ "$(count_of "$table")" -ge "$n" ]; do sleep 0.1; done
  # shellcheck disable=SC2086
  c1=$(cpu_of $ps)
  if [ -n "$perf" ]; then kill -INT "$perf"; wait "$perf" 2>/dev/null || true; fi
  sdp_log "$name: processes $(echo $ps) CPU ticks $c0 -> $c1"
  secs=$(sql -c "SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) - min(pg_xact_commit_timestamp(xmin))) FROM $table")
  # the first commit's rows are not in the rate (it starts at their commit)
  local first
  first=$(sql -c "SELECT count(*) FROM $table WHERE pg_xact_commit_timestamp(xmin) = (SELECT min(pg_xact_commit_timestamp(xmin)) FROM $table)")
  "${peer}_stop" "$name"
  sql -c "SET client_min_messages = warning; DROP TRIGGER IF EXISTS enrich ON $table"   # COPY writes the rows as they are
  local cp
  cp=$(copy_cpu "$table" wall)
  echo "$(echo "($n - $first) / $secs" | bc -l) $(echo "($c1 - $c0) * 1000000 / $ticks / $n" | bc -l) ${cp% *} $(echo "$n / ${cp#* }" | bc -l)"
}

# latency PEER RATE SEQSTART: prints "p50 p99 floor_p50 floor_p99 rows"
latency() {
  local peer=$1 rate=$2 from=$3 name=${1}_live table=${1}_live sent f
  f=$(sql -c "SELECT count(*) FROM $table")
  local ft=live_$peer
  declare -F "${peer}_floor_topic" >/dev/null && ft=$("${peer}_floor_topic")
  tools/kafka_floor --bootstrap "$boot" --topic "$ft" --duration $((lat_seconds + 3)) --out "$dir/floor.txt" > "$dir/floor.json" &
  local fpid=$!
  until grep -q ready "$dir/floor.json" 2>/dev/null; do sleep 0.1; done
  tools/flight_sim --bootstrap "$boot" --topic "live_$peer" --aircraft 2000 --rate "$rate" --duration "$lat_seconds" \
    --seq-start "$from" --linger-ms 5 --quiet > "$dir/sim.json"
  sent=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["delivered"])' "$dir/sim.json")
  wait "$fpid" || true
  local waited=0
  until [ "$(count_of "$table")" -ge $((f + sent)) ] || [ $waited -ge 600 ]; do sleep 0.1; waited=$((waited + 1)); done
  local floor
  floor=$(tail -1 "$dir/floor.json" | python3 -c 'import json,sys; d = json.load(sys.stdin); print(d["p50_ms"], d["p99_ms"])' 2>/dev/null || echo "nan nan")
  echo "$(sql -c "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2), round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2)
                  FROM (SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - poller_ts) * 1000 AS ms FROM $table WHERE seq >= $from) s" | tr '|' ' ') $floor $sent"
}

# killed PEER: prints "duplicates lost killed_at"; KILL_EVENTS produced at
# 5,000 a second while the peer runs, the peer SIGKILLed when a third of them
# are in its table and started again
killed() {
  local peer=$1 name=${1}_kill table=${1}_kill last=-1 now stable=0 at sim
  make_table "$table" append
  "${peer}_start" "kill_$peer" "$table" append "$name"
  tools/flight_sim --bootstrap "$boot" --topic "kill_$peer" --aircraft 2000 --count "$kill_n" --rate 5000 \
    --linger-ms 5 --quiet > "$dir/kill_sim.json" &
  sim=$!
  until [ "$(count_of "$table")" -ge $((kill_n / 3)) ]; do sleep 0.02; done
  at=$(count_of "$table")
  "${peer}_kill" "$name"
  sdp_log "$peer: killed at $at rows of $kill_n"
  if [ "$peer" = sdp_ext ]; then
    # the postmaster reinitializes: wait for it to take connections again
    sleep 1
    until sql -c 'SELECT 1' >/dev/null 2>&1; do sleep 0.2; done
  fi
  "${peer}_restart" "$name"
  wait "$sim" || sdp_log "$peer: the producer did not deliver every message"
  # until the table holds every seq, or has not grown for 90 s (a consumer
  # group gives a dead member's partitions to the new one only after its
  # session timeout, 45 s by default)
  while [ $stable -lt 900 ]; do
    now=$(sql -c "SELECT count(DISTINCT seq) FROM $table" 2>/dev/null || echo "$last")
    [ "$now" -ge "$kill_n" ] && break
    if [ "$now" = "$last" ]; then stable=$((stable + 1)); else stable=0; last=$now; fi
    sleep 0.1
  done
  sleep 2   # a duplicate written after the last seq arrived
  "${peer}_stop" "$name"
  echo "$(sql -c "SELECT count(*) - count(DISTINCT seq), $kill_n - count(DISTINCT seq) FROM $table" | tr '|' ' ') $at"
}

# PEERS_AB: sdp_ext's drain with two builds, alternating
if [ -n "${PEERS_AB:-}" ]; then
  read -r -a sos <<<"$PEERS_AB"
  [ ${#sos[@]} -eq 2 ] || { echo "PEERS_AB needs two .so files" >&2; exit 2; }
  pkglib=$("$SDP_PG_BIN/pg_config" --pkglibdir)
  sdp_as_root cp "$pkglib/sdp_ext.so" "$dir/installed.so"
  for so in "${sos[@]}"; do sdp_as_root cp "$so" "$dir/$(basename "$so").ab"; done
  declare -A ab
  for ((r = 1; r <= ${PEERS_AB_ROUNDS:-3}; r++)); do
    for b in 0 1; do
      bench_stop
      sdp_as_root cp "$dir/$(basename "${sos[$b]}").ab" "$pkglib/sdp_ext.so"
      bench_start
      for mode in $(modes_of sdp_ext); do
        sdp_log "A/B round $r, ${sos[$b]}: draining $n events ($mode)"
        ab[$b.$mode]+="$(drain sdp_ext "$mode")"$'\n'
      done
    done
  done
  bench_stop
  sdp_as_root cp "$dir/installed.so" "$pkglib/sdp_ext.so"
  bench_start
  {
    echo "sdp_ext, two builds, $n events, ${PEERS_AB_ROUNDS:-3} rounds alternating, medians (each drain beside its own COPY)"
    printf '%-40s %-7s %9s %6s %7s %7s %6s\n' build mode events/s xCOPY "ms/1k" "COPY" xCOPY
    for b in 0 1; do
      for mode in $(modes_of sdp_ext); do
        printf '%s' "${ab[$b.$mode]}" | awk -v b="${sos[$b]}" -v m="$mode" '
          { r[NR] = $1; c[NR] = $2; cc[NR] = $3; rr[NR] = $1 / $4; x[NR] = $2 / $3 }
          function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                         return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
          END { printf "%-40s %-7s %9.0f %6.2f %7.2f %7.2f %6.2f\n", b, m, med(r, NR), med(rr, NR), med(c, NR), med(cc, NR), med(x, NR) }'
      done
    done
  } | tee "$out.ab.txt"
fi

# div A B: A / B, or nan when either is not a number (a step left out)
div() { awk -v a="$1" -v b="$2" 'BEGIN { r = "^-?[0-9]*[.]?[0-9]+(e[-+]?[0-9]+)?$"
  if (a ~ r && b ~ r && b + 0 != 0) printf "%.6f\n", a / b; else print "nan" }'; }

declare -A res
for p in $peers; do
  for mode in $(modes_of "$p"); do res[$p.drain.$mode]="nan nan nan nan"; done
  res[$p.lat.1000]="- - - - -"; res[$p.lat.10000]="- - - - -"; res[$p.lat.50000]="- - - - -"; res[$p.kill]="- - -"
  if [[ "$steps" == *" drain "* ]]; then
    for mode in $(modes_of "$p"); do
      sdp_log "$p: draining $n events ($mode)"
      res[$p.drain.$mode]=$(drain "$p" "$mode")
    done
  fi
  if [[ "$steps" == *" latency "* ]]; then
    sdp_log "$p: latency"
    make_table "${p}_live" append
    "${p}_start" "live_$p" "${p}_live" append "${p}_live"
    res[$p.lat.1000]=$(latency "$p" 1000 100000000)
    res[$p.lat.10000]=$(latency "$p" 10000 200000000)
    # 50,000 a second: the target is sdp_ext's (the peers fall behind at
    # 10,000 already, and would take minutes to drain what a run produces)
    [ "$p" = sdp_ext ] && res[$p.lat.50000]=$(latency "$p" 50000 300000000)
    "${p}_stop" "${p}_live"
  fi
  if [[ "$steps" == *" kill "* ]]; then
    sdp_log "$p: SIGKILL mid-stream"
    res[$p.kill]=$(killed "$p")
  fi
done

{
  echo "sdp_ext beside its peers, $(date -u), $(nproc) cores, PostgreSQL $(sql -c 'SHOW server_version'), Apache Kafka (one broker, $partitions partitions), $(git rev-parse --short HEAD)"
  echo "drain: $n events; CPU of the peer's processes and its PostgreSQL backends per 1,000 events; COPY of the same rows beside it"
  echo "latency: producer's time in the payload -> the row's commit time, ms, $lat_seconds s per rate; floor: a bare consumer of the same messages"
  echo "kill: $kill_n events produced at 5,000/s, the peer SIGKILLed at a third and started again: rows written twice, rows missing"
  printf '%-13s %-7s %9s %6s %7s %6s %9s | %7s %7s %7s | %7s %7s %7s | %7s %7s | %5s %5s\n' peer mode events/s xCOPY "ms/1k" xCOPY "ev/cpu-s" \
    "P50@1k" "P99@1k" floor "P50@10k" "P99@10k" floor "P99@50k" floor dup lost
  for p in $peers; do
    for mode in $(modes_of "$p"); do
      read -r rate cpu ccpu crate <<<"${res[$p.drain.$mode]}"
      if [ $mode = append ]; then
        read -r l50 l99 f50 f99 _ <<<"${res[$p.lat.1000]}"
        read -r h50 h99 g50 g99 _ <<<"${res[$p.lat.10000]}"
        read -r _ k99 _ j99 _ <<<"${res[$p.lat.50000]}"
        read -r dup lost _ <<<"${res[$p.kill]}"
      else
        l50=- l99=- f99=- h50=- h99=- g99=- k99=- j99=- dup=- lost=-
      fi
      printf '%-13s %-7s %9.0f %6.2f %7.2f %6.2f %9.0f | %7s %7s %7s | %7s %7s %7s | %7s %7s | %5s %5s\n' "$p" "$mode" "$rate" \
        "$(div "$rate" "$crate")" "$cpu" "$(div "$cpu" "$ccpu")" \
        "$(div 1000000 "$cpu")" "$l50" "$l99" "$f99" "$h50" "$h99" "$g99" "$k99" "$j99" "$dup" "$lost"
    done
  done
} | tee "$out.txt"

if [[ "$steps" == *" drain "* && "$steps" == *" latency "* ]]; then
# the chart: events per CPU-second (append drain) and P99 at 10,000 events/s
{
  for p in $peers; do
    read -r _ cpu _ _ <<<"${res[$p.drain.append]}"
    read -r _ h99 _ _ _ <<<"${res[$p.lat.10000]}"
    echo "$p $(div 1000000 "$cpu") $h99"
  done
} > "$dir/chart.dat"
gnuplot <<GP
set terminal pngcairo size 1200,460 font ",10" noenhanced
set output "$out.png"
set multiplot layout 1,2 title "sdp_ext and its peers, $(date -u +%F), $n events, Apache Kafka, PostgreSQL 15"
set style data histograms
set style fill solid 0.8
set boxwidth 0.7
set xtics rotate by -20
set grid ytics
set yrange [0:*]
unset key
set title "events per CPU-second (higher is better)"
plot "$dir/chart.dat" using 2:xtic(1) lc rgb "#3465a4"
set title "e2e P99 at 10,000 events/s, ms (lower is better)"
plot "$dir/chart.dat" using 3:xtic(1) lc rgb "#cc0000"
unset multiplot
GP
echo "chart: $out.png"
fi

line="peers:"
sep=" "
for p in $peers; do
  read -r _ cpu _ _ <<<"${res[$p.drain.append]}"
  read -r _ h99 _ _ _ <<<"${res[$p.lat.10000]}"
  read -r dup _ <<<"${res[$p.kill]}"
  line+="$sep$p $(printf '%.0f' "$(div 1000000 "$cpu")") $h99 $dup"
  sep="; "
done
echo "$line" | tee -a "$out.txt"
