# bench/server.sh: the throwaway server every benchmark script runs on
# (sourced after scripts/common.sh).
#
#   bench_server NAME [CONF]   makes $dir (/tmp/sdp_NAME.XXXXXX, the
#       postgres user's), runs initdb in $dir/pg with the benchmarks'
#       settings (shared_preload_libraries, port $port, a socket in $dir
#       only, 512 MB of shared buffers, no checkpoint during a run, 16
#       worker processes) plus the lines CONF, and sets the exit trap.  The
#       server is not started.
#   bench_start, bench_stop    start or stop it (log: $dir/postgres.log)
#   sql ARGS...                psql on it, as postgres, quiet, unaligned
#   pids+=($!)                 background processes the exit kills
#   bench_on_exit              a command the exit runs before $dir goes
#                              (e.g. to copy the log, or put a build back)
#
#   bench_broker TOPIC:PARTITIONS...   the broker the benchmark runs against,
#       with those topics: SDP_BENCH_BROKER=embedded (tools/sdp_broker,
#       librdkafka's mock cluster; the default) or kafka (Apache Kafka, a
#       single-node KRaft broker of scripts/kafka.sh, fetched once per
#       machine, topics created with tools/kafka_admin).  Sets $boot (its
#       address), $broker (the broker's pid, for its CPU time),
#       $broker_kind and $source_options (the JSON every benchmark source
#       starts from: on the embedded broker {"fetch.wait.max.ms": "1"}, as
#       librdkafka's mock answers an empty fetch only after the whole wait;
#       on Apache Kafka {}, the extension's default of 100 ms) and
#       floor_options (the same for tools/kafka_floor, as -X arguments); the
#       exit stops it.
#   median                     the median of the numbers on stdin (nan: none)
#   copy_cpu TABLE             COPY the table's rows back into it, emptied
#                              (server-side, from a CSV file): prints the
#                              COPY backend's CPU in us per 1,000 rows
#                              ($ticks: getconf CLK_TCK)
#   wait_running PATTERN [N]   until N flows (default 1) whose names are LIKE
#                              PATTERN run with their partitions assigned
#   wait_relay NAME            until the sink flow NAME's relay has read its
#                              topic back (before it takes any input: not in
#                              a measured window)
#
# And the flow both run.sh (section 5) and window_burst.sh measure:
#   make_payments_flow NAME TOPIC TABLE WINDOW [WORKERS]   a source NAME on
#       TOPIC of the broker at $boot, a window table TABLE, and a window_agg
#       flow NAME over payment_sim's events with 5 aggregations per merchant
#       (count, sum, avg, ratio, approx_distinct) of WINDOW, allowance 200 ms

bench_server() {  # name [extra postgresql.conf lines]
  dir=$(mktemp -d "/tmp/sdp_$1.XXXXXX")
  sdp_as_root chown postgres:postgres "$dir"
  pids=()
  trap bench_cleanup EXIT
  sdp_initdb "$dir/pg" "$dir" "$port" "shared_buffers = '512MB'
max_wal_size = '8GB'
checkpoint_timeout = '30min'
${2:-}"
}

bench_start() { sdp_as_postgres pg_ctl -D "$dir/pg" -l "$dir/postgres.log" -w start >/dev/null; }
bench_stop() { sdp_as_postgres pg_ctl -D "$dir/pg" -m fast -w stop >/dev/null; }

sql() { sdp_as_postgres psql -X -q -At -h "$dir" -p "$port" -U postgres -d postgres "$@"; }

bench_broker() {  # topic:partitions...
  local t
  broker_kind=${SDP_BENCH_BROKER:-embedded}
  case $broker_kind in
    embedded)
      tools/sdp_broker "${@/#/--topic=}" --addr-file "$dir/broker.addr" --quiet > "$dir/broker.log" 2>&1 &
      broker=$!
      pids+=($broker)
      # the mock cluster creates its topics one by one before it writes the address: about
      # 0.25 s each on a loaded machine (60 topics of bench/sink.sh SINK_STANDBY=1: 15 s)
      for _ in $(seq 600); do [ -s "$dir/broker.addr" ] && break; sleep 0.1; done
      boot=$(cat "$dir/broker.addr")
      source_options='{"fetch.wait.max.ms": "1"}'
      floor_options=(-X fetch.wait.max.ms=1) ;;
    kafka)
      command -v java >/dev/null || sdp_install_packages openjdk-17-jre-headless
      command -v mvn >/dev/null || sdp_install_packages maven
      sdp_as_root bash scripts/kafka.sh fetch >/dev/null
      bench_kafka_dir=$(mktemp -d /tmp/sdp_bench_kafka.XXXXXX)
      boot=$(bash scripts/kafka.sh start "$bench_kafka_dir" | sed -n 's/^KAFKA_PLAINTEXT=//p')
      broker=$(cat "$bench_kafka_dir/kafka.pid")
      for t; do tools/kafka_admin --bootstrap "$boot" create "${t%%:*}" "${t##*:}" >/dev/null; done
      source_options='{}'
      floor_options=() ;;
    *) sdp_log "SDP_BENCH_BROKER must be embedded or kafka, not '$broker_kind'"; exit 2 ;;
  esac
  sdp_log "broker: $broker_kind at $boot"
}

bench_cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  [ -n "${bench_kafka_dir:-}" ] && { bash scripts/kafka.sh stop "$bench_kafka_dir"; rm -rf "$bench_kafka_dir"; }
  [ -f "$dir/pg/postmaster.pid" ] && sdp_as_postgres pg_ctl -D "$dir/pg" -m fast stop >/dev/null 2>&1
  [ -n "${bench_on_exit:-}" ] && eval "$bench_on_exit"
  sdp_as_root rm -rf "$dir"
}

wait_running() {  # LIKE pattern [count]
  until [ "$(sql -c "SELECT count(*) = ${2:-1} FROM sdp.flow_status WHERE flow LIKE '$1' AND state = 'running' AND partitions IS NOT NULL")" = t ]; do sleep 0.1; done
}

wait_relay() {  # sink flow
  local i
  sleep 0.5
  for i in $(seq 300); do
    [ "$(sql -c "SELECT coalesce(bool_and(a.query IS DISTINCT FROM 'sdp: producing to the sink'), true)
                 FROM sdp.flow_status s JOIN pg_stat_activity a ON a.pid = s.pid WHERE s.flow = '$1'")" = t ] && break
    sleep 0.1
  done
  sleep 0.5
}

make_payments_flow() {  # name topic table window [workers]
  sql >/dev/null <<SQL
SELECT sdp_create_source('$1', '$boot', '$2', '$source_options');
SELECT sdp_create_window_table('$3');
SELECT sdp_create_flow('$1', source => '$1', target => '$3',
  schema => 'merchant_id text, country text, method text, status text, amount numeric, event_ts timestamptz',
  operator => 'window_agg', options => '{"event_time": "event_ts", "idle_timeout": "2 seconds", "progress_interval": "5 seconds", "workers": ${5:-1}}');
SELECT sdp_load_aggregations('$1', \$\$[
  {"name": "payments", "group_by": ["merchant_id"], "operation": "count", "window_size": "$4", "allowance": "200 ms"},
  {"name": "approved_volume", "group_by": ["merchant_id", "country"], "operation": "sum", "value": "amount",
   "filter": "status = 'approved'", "window_size": "$4", "allowance": "200 ms"},
  {"name": "avg_ticket", "group_by": ["merchant_id"], "operation": "avg", "value": "amount", "window_size": "$4", "allowance": "200 ms"},
  {"name": "rejection_ratio", "group_by": ["merchant_id"], "operation": "ratio", "filter": "status = 'rejected'",
   "denominator_filter": "true", "window_size": "$4", "allowance": "200 ms"},
  {"name": "countries", "group_by": ["merchant_id"], "operation": "approx_distinct", "value": "country",
   "window_size": "$4", "allowance": "200 ms"}]\$\$);
SQL
}

# copy_cpu TABLE [wall]: COPY the table's rows back into it, emptied; prints
# us of CPU per row (ms per 1,000 rows), and with "wall" the COPY's seconds too
copy_cpu() {
  local out c0 c1 rows w0 w1
  sql -c "COPY $1 TO '$dir/rows.csv' (FORMAT csv)"
  rows=$(sql -c "SELECT count(*) FROM $1")
  sql -c "TRUNCATE $1; CHECKPOINT"
  out=$(sql <<SQL
SELECT pg_backend_pid() AS bpid \gset
\setenv BPID :bpid
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat; date +%s.%N
COPY $1 FROM '$dir/rows.csv' (FORMAT csv);
\! awk '{print \$14 + \$15}' /proc/\$BPID/stat; date +%s.%N
SQL
)
  c0=$(echo "$out" | sed -n 1p); w0=$(echo "$out" | sed -n 2p)
  c1=$(echo "$out" | sed -n 3p); w1=$(echo "$out" | sed -n 4p)
  if [ "${2:-}" = wall ]; then
    echo "$(echo "($c1 - $c0) * 1000000 / $ticks / $rows" | bc -l) $(echo "$w1 - $w0" | bc -l)"
  else
    echo "($c1 - $c0) * 1000000 / $ticks / $rows" | bc -l
  fi
}

# median: of the numbers on stdin (spaces or lines)
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
