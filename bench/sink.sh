#!/usr/bin/env bash
# bench/sink.sh: a flow writing to a Kafka sink, beside the same flow writing
# to a table and beside the transport floor (issue 14).
#
# The flow is the enrich flow of examples/flights.sql (JSON decode, the SQL
# transform with the zone lookup), in append mode, with one more column,
# src_ts: its input message's Kafka timestamp in ms, carried through to the
# output so that the output's consumer can time it.
#
#  1. latency, at each rate of SINK_RATES (default 1,000 and 10,000 events/s),
#     SINK_ROUNDS rounds (default 3), the table flow and the sink flow one
#     after the other (the order alternates by round), each on a fresh
#     4-partition topic with tools/flight_sim producing for 10 s:
#       table: e2eLatencyMs of the flow's first progress report whose 4-second
#              window starts after the producer did (Kafka timestamp ->
#              commit of its rows), as bench/run.sh section 2;
#       sink:  the same report (-> commit of its outbox rows), and the time
#              from src_ts to the receipt of the output message by a
#              read_committed consumer of the sink's topic (tools/kafka_floor
#              --payload-ts src_ts), over the same window;
#       floor: a bare consumer of the input topic (tools/kafka_floor) in the
#              same run, over the same window.
#       2-hop floor (a round of its own, at the rates of SINK_HOP2_RATES,
#              default both): no flow; a bare consumer of the input topic
#              produces every message it reads to another topic (kafka_floor
#              --relay-to, linger 1 ms, not transactional), and a bare consumer
#              times them there from their input timestamp: two trips through
#              Kafka and nothing else, the least any flow that writes back to
#              Kafka can see; beside it the 1-hop floor as in the other
#              rounds, over the window from 2 to 6 s after the producer
#              started.  Not beside the sink flow: the pipe's traffic is the
#              sink flow's own (a consumer fetching every millisecond, a
#              producer, a consumer of its output), and the embedded broker
#              carrying both at 10,000 events/s saturated the 2 cores (1-hop
#              floor P99 430-790 ms).
#       2-hop txn floor (a round of its own, at the same rates): the same
#              pipe producing in Kafka transactions, one per round of what
#              has arrived, committed once acknowledged (kafka_floor
#              --transactional), and a read_committed consumer of its
#              output: what an exactly-once write back to Kafka costs here
#              without PostgreSQL (no outbox, no commit, no WAL flush).
#       standby (with SINK_STANDBY=1, beside the others in every round): the
#              sink flow again, with sdp.standby_slots naming the slot of a
#              streaming standby of the server (asynchronous, on the same
#              machine, started with pg_basebackup before the rounds and
#              streaming throughout, for the other kinds too): its rows are
#              produced once the standby has flushed their batches
#              (README, Failover with a Kafka sink); the difference from the
#              sink's row is what that wait costs.
#     Each round also gives the CPU (user + system, all threads, /proc) of the
#     flow's worker (or the pipe) and of the broker over the producer's 10 s,
#     in % of a core; the transactional pipe's, per Kafka transaction too;
#     and of the whole machine (/proc/stat, every process, summed over its
#     cores), busy and stolen by the hypervisor: a round whose machine is
#     near all of its cores measures the machine, not the flow.
#  2. throughput: a backlog of SINK_EVENTS (default 150,000) events on 8
#     partitions, produced beforehand, drained by a new flow, SINK_RUNS times
#     (default 3) for each case, alternating: into an unindexed table, and to
#     a sink (a fresh 8-partition topic each run).  events/s from the flow's
#     first message read until it has read them all and, for the sink, its
#     outbox is empty (every row produced and committed to Kafka); CPU ms per
#     1,000 events = user + system time of the worker process (all its
#     threads, librdkafka's producer included) from /proc, as bench/cpu.sh.
#
# Usage: bash bench/sink.sh      Nothing is asserted; it installs the tree into
# Debian's PostgreSQL (or, with SDP_PG_BIN=DIR, into the PostgreSQL in DIR),
# starts its own server (port 5494) and broker, and leaves nothing running.
#   SINK_PARTS="latency throughput"  which parts to run (default both)
#   SINK_FLOW_OPTIONS='{"max_batch_wait": "20 ms"}'  more options of the sink flows (jsonb)
#   SINK_PERF=DIR                    perf record -g of the sink flow's worker
#                                    during the latency rounds into DIR
#   SINK_LOG=FILE                    keep the server's log there
#   RDKAFKA_PREFIX=DIR               build the extension and the tools against the
#                                    librdkafka in DIR (bench/librdkafka.sh), from
#                                    a clean tree (make clean; rm the tools)
#   SINK_STANDBY=1                   a streaming standby, and the latency rounds' standby kind
#   SINK_LINGER_MS=N                 linger.ms of the throughput backlog's producer
#                                    (default 100: record batches a fetch brings
#                                    whole, as from a Kafka broker; bench/cpu.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
. bench/server.sh

rates=${SINK_RATES:-1000 10000}
rounds=${SINK_ROUNDS:-3}
n=${SINK_EVENTS:-150000}
runs=${SINK_RUNS:-3}
parts=${SINK_PARTS:-latency throughput}
port=${BENCH_PORT:-5494}

if [ "$SDP_PG_BIN" = "/usr/lib/postgresql/$SDP_PG_VERSION/bin" ]; then
  sdp_install_packages bc
  sdp_build_install
else
  sdp_build_tools
  make -s -j2 PG_CONFIG="$SDP_PG_BIN/pg_config" CI="${CI:-}" >/dev/null
  make -s install PG_CONFIG="$SDP_PG_BIN/pg_config" >/dev/null
fi
ticks=$(getconf CLK_TCK)
# which librdkafka the extension and the tools run with (RDKAFKA_PREFIX)
echo "librdkafka: $(ldd "$($SDP_PG_BIN/pg_config --pkglibdir)/sdp_ext.so" | awk '/librdkafka/ {print $3}'), tools: $(ldd tools/kafka_floor | awk '/librdkafka/ {print $3}')"

bench_server sink 'track_commit_timestamp = on'
[ -n "${SINK_LOG:-}" ] && bench_on_exit='cp "$dir/postgres.log" "$SINK_LOG"'
bench_start
if [ "${SINK_STANDBY:-0}" = 1 ]; then
  # an asynchronous standby on a physical slot, on the next port, its WAL receiver streaming throughout
  sql -c "SELECT pg_create_physical_replication_slot('bench_standby')" >/dev/null
  sdp_as_postgres pg_basebackup -h "$dir" -p "$port" -U postgres -D "$dir/standby" -X stream -S bench_standby -R >/dev/null
  echo "port = $((port + 1))" | sdp_as_postgres tee -a "$dir/standby/postgresql.conf" >/dev/null
  sdp_as_postgres pg_ctl -D "$dir/standby" -l "$dir/standby.log" -w start >/dev/null
  bench_on_exit="sdp_as_postgres pg_ctl -D \"\$dir/standby\" -m immediate stop >/dev/null 2>&1; ${bench_on_exit:-}"
  until [ "$(sql -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'bench_standby'")" = t ]; do sleep 0.1; done
fi
now() { date +%s.%N; }
cputicks() { awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$1/stat"; }  # utime + stime of PID (all threads)
# the machine's busy and stolen ticks, summed over its cores: "BUSY STEAL"
# (busy = user + nice + system + irq + softirq; steal = time the hypervisor ran others)
machineticks() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8, $9}' /proc/stat; }

topics=(tput:8)
for r in $(seq "$runs"); do topics+=("tput_out$r:8"); done
for rate in $rates; do
  for r in $(seq "$rounds"); do
    topics+=("t${rate}_$r:4" "s${rate}_$r:4" "o${rate}_$r:4" "h${rate}_$r:4" "f${rate}_$r:4" "e${rate}_$r:4" "g${rate}_$r:4")
    [ "${SINK_STANDBY:-0}" = 1 ] && topics+=("w${rate}_$r:4" "x${rate}_$r:4")
  done
done
bench_broker "${topics[@]}"

sql -c 'CREATE EXTENSION sdp_ext'
sed -n '/^CREATE TABLE zones/,/^SELECT sdp_create_source/p' examples/flights.sql | sed '$d' | sql >/dev/null
transform=$(sed -n '/^  transform => \$\$$/,/\$\$,$/p' examples/flights.sql | sed '1s/^  transform => \$\$//; $s/\$\$,$//')
# the enrich transform, and the input's Kafka timestamp (ms) as src_ts
transform=${transform/AS updated_at/AS updated_at, (extract(epoch FROM i.kafka_timestamp) * 1000)::int8 AS src_ts}
pos_schema='icao24 text, callsign text, lat float8, lon float8, baro_alt float8, vert_rate float8, squawk text, velocity float8, heading float8, poller_ts timestamptz'

# make_flow KIND NAME TOPIC OUT PROGRESS [SOURCE-OPTIONS]: KIND table (OUT a
# new unindexed table) or sink (OUT the sink's topic)
make_flow() {
  local kind=$1 name=$2 topic=$3 out=$4 progress=$5
  local srcopts=$(sql -c "SELECT '$source_options'::jsonb || '${6:-{\}}'")
  if [ "$kind" = table ]; then
    sql >/dev/null <<SQL
CREATE TABLE $out (LIKE positions INCLUDING DEFAULTS, src_ts int8);
SELECT sdp_create_source('$name', '$boot', '$topic', '$srcopts');
SELECT sdp_create_flow('$name', source => '$name', target => '$out', schema => '$pos_schema',
  transform => \$t\$ $transform \$t\$,
  options => '{"mode": "append", "progress_interval": "$progress"}');
SQL
  else
    sql >/dev/null <<SQL
SELECT sdp_create_source('$name', '$boot', '$topic', '$srcopts');
SELECT sdp_create_sink('$name', '$boot', '$out');
SELECT sdp_create_flow('$name', source => '$name', sink => '$name', schema => '$pos_schema',
  transform => \$t\$ $transform \$t\$,
  options => '{"mode": "append", "sink_key": "icao24", "progress_interval": "$progress"}'::jsonb || '${SINK_FLOW_OPTIONS:-{\}}');
SQL
  fi
}
drop_flow() {  # name kind
  sql -c "SELECT sdp_drop_flow('$1')" -c "SELECT sdp_drop_source('$1')" >/dev/null
  [ "$2" = sink ] && sql -c "SELECT sdp_drop_sink('$1')" >/dev/null
  return 0
}
# pct FILE LO HI: "P50 P99 count" in ms of the latencies (us, column 2) whose timestamp (ms, column 1) is in [LO, HI]
pct() {
  awk -v lo="$2" -v hi="$3" '$1 >= lo && $1 <= hi {print $2}' "$1" | sort -n | awk '{v[NR]=$1} END {
      if (NR == 0) {print "nan nan 0"; exit}
      printf "%.3f %.3f %d\n", v[int((NR*50+99)/100)]/1000, v[int((NR*99+99)/100)]/1000, NR}'
}

out=bench/out; mkdir -p "$out"; report="$out/sink-$(date -u +%Y%m%dT%H%M%SZ).txt"
{
echo "sdp_ext sink benchmark, $(date -u), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), broker $broker_kind, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo

if [[ " $parts " == *" latency "* ]]; then
declare -A res
echo "Latency (ms), the enrich flow in append mode; floor = bare consumer of the input topic, same run, same window"
echo "  table: e2eLatencyMs (Kafka timestamp -> commit); sink: the same to the commit of its outbox rows (\"to commit\"),"
echo "  and to the receipt of the output message by a read_committed consumer of the sink's topic (\"to consumer\")"
echo "  CPU: % of a core over the producer's 10 s, of the flow's worker (or the pipe) and of the broker;"
echo "  machine: of all the machine's cores (every process; $(nproc) cores: $(( $(nproc) * 100 )) is all of them), busy and stolen by the hypervisor"
printf '  %-22s %-6s %9s %9s %9s %9s %9s %9s %11s %8s %6s %6s %7s %5s\n' "case" "round" "P50" "P99" "floor P50" "floor P99" "commit P50" "commit P99" "P99 - floor" "samples" "CPU" "broker" "machine" "steal"
for rate in $rates; do
  hop2=0; [[ " ${SINK_HOP2_RATES:-1000 10000} " == *" $rate "* ]] && hop2=1
  for r in $(seq "$rounds"); do
    # the order of the kinds turns by round
    kinds=(table sink); [ "${SINK_STANDBY:-0}" = 1 ] && kinds+=(standby); [ "$hop2" = 1 ] && kinds+=(hop2 eos)
    order=""; for i in "${!kinds[@]}"; do order+=" ${kinds[$(( (i + r - 1) % ${#kinds[@]} ))]}"; done
    for kind in $order; do
      name="${kind:0:1}${rate}_$r"; [ "$kind" = standby ] && name="w${rate}_$r"
      intopic=$name
      if [ "$kind" = hop2 ] || [ "$kind" = eos ]; then
        # the 2-hop floor: a pipe of its own (so the 1-hop floor stays a bare consumer), and its
        # consumer; eos: the pipe produces in Kafka transactions, read by a read_committed consumer
        pipeout="f${rate}_$r"; pipeopt=(); consopt=()
        [ "$kind" = eos ] && { pipeout="g${rate}_$r"; pipeopt=(--transactional); consopt=(-X isolation.level=read_committed); }
        tools/kafka_floor "${floor_options[@]}" --bootstrap "$boot" --topic "$pipeout" --duration 14 "${consopt[@]}" --out "$dir/hop2_$name.txt" > "$dir/hop2_$name.json" &
        hpid=$!
        while ! grep -q ready "$dir/hop2_$name.json" 2>/dev/null; do sleep 0.05; done
        tools/kafka_floor "${floor_options[@]}" --bootstrap "$boot" --topic "$intopic" --duration 13 --relay-to "$pipeout" "${pipeopt[@]}" > "$dir/pipe_$name.json" &
        wpid=$!
        while ! grep -q ready "$dir/pipe_$name.json" 2>/dev/null; do sleep 0.05; done
      else
        if [ "$kind" = table ]; then o="out_$name"; elif [ "$kind" = sink ]; then o="o${rate}_$r"; else o="x${rate}_$r"; fi
        # the standby kind: the sink flow, its rows waiting for the standby's flush
        [ "$kind" = standby ] && sql -c "ALTER SYSTEM SET sdp.standby_slots = 'bench_standby'" -c "SELECT pg_reload_conf()" >/dev/null
        make_flow "$( [ "$kind" = table ] && echo table || echo sink)" "$name" "$intopic" "$o" "4 seconds"
        wait_running "$name"
        wait_relay "$name"
        wpid=$(sql -c "SELECT pid FROM sdp.flow_status WHERE flow = '$name'")
      fi
      tools/kafka_floor "${floor_options[@]}" --bootstrap "$boot" --topic "$intopic" --duration 13 --out "$dir/floor_$name.txt" > "$dir/floor_$name.json" &
      fpid=$!
      while ! grep -q ready "$dir/floor_$name.json" 2>/dev/null; do sleep 0.05; done
      if [ "$kind" = sink ] || [ "$kind" = standby ]; then
        tools/kafka_floor "${floor_options[@]}" --bootstrap "$boot" --topic "$o" --duration 14 --payload-ts src_ts \
          -X isolation.level=read_committed --out "$dir/cons_$name.txt" > "$dir/cons_$name.json" &
        cpid=$!
        while ! grep -q ready "$dir/cons_$name.json" 2>/dev/null; do sleep 0.05; done
        if [ -n "${SINK_PERF:-}" ]; then
          perf record -g -o "$SINK_PERF/$name.data" -p "$(sql -c "SELECT pid FROM sdp.flow_status WHERE flow = '$name'")" \
            -- sleep 6 >/dev/null 2>&1 &
        fi
      fi
      w0=$(cputicks "$wpid"); b0=$(cputicks "$broker"); read -r m0 s0 < <(machineticks)
      t0=$(date +%s.%N)
      tools/flight_sim --bootstrap "$boot" --topic "$intopic" --aircraft 2000 --rate "$rate" --linger-ms 1 \
        --duration 10 --quiet > /dev/null &
      sim=$!
      if [ "$kind" = hop2 ] || [ "$kind" = eos ]; then
        # no flow, no progress report: the window from 2 to 6 s after the producer started
        wait "$sim"
        wcpu=$(( $(cputicks "$wpid") - w0 )); bcpu=$(( $(cputicks "$broker") - b0 ))
        read -r m1 s1 < <(machineticks)
        wait "$fpid"; wait "$hpid"; wait "$wpid"
        lo=$(echo "$t0 * 1000 + 2000" | bc -l); hi=$(echo "$lo + 4000" | bc -l)
        cp50=-; cp99=-
      else
        # the first progress report whose 4-second window starts after the producer did
        until [ "$(sql -c "SELECT coalesce(extract(epoch FROM (j->>'timestamp')::timestamptz) - (j->>'intervalSeconds')::float8 >= $t0, false)
                           FROM (SELECT sdp_flow_progress('$name') AS j) s")" = t ]; do sleep 0.1; done
        p=$(sql -c "SELECT sdp_flow_progress('$name')")
        wait "$sim"
        wcpu=$(( $(cputicks "$wpid") - w0 )); bcpu=$(( $(cputicks "$broker") - b0 ))
        read -r m1 s1 < <(machineticks)
        wait "$fpid"
        read -r cp50 cp99 nsamples hi len < <(sql -c "SELECT concat_ws(' ',
            j->'latencies'->'e2eLatencyMs'->>'P50', j->'latencies'->'e2eLatencyMs'->>'P99',
            j->'latencies'->'e2eLatencyMs'->>'samples',
            extract(epoch FROM (j->>'timestamp')::timestamptz) * 1000, (j->>'intervalSeconds')::float8 * 1000)
          FROM (SELECT '$p'::jsonb AS j) s")
        lo=$(echo "$hi - $len" | bc -l)
      fi
      read -r fp50 fp99 fn < <(pct "$dir/floor_$name.txt" "$lo" "$hi")
      if [ "$kind" = sink ] || [ "$kind" = standby ]; then
        wait "$cpid"
        read -r sp50 sp99 sn < <(pct "$dir/cons_$name.txt" "$lo" "$hi")
        label="sink $rate/s"; [ "$kind" = standby ] && label="sink+standby $rate/s"
      fi
      if [ "$kind" = hop2 ] || [ "$kind" = eos ]; then
        read -r sp50 sp99 sn < <(pct "$dir/hop2_$name.txt" "$lo" "$hi")
        label="2-hop floor $rate/s"; [ "$kind" = eos ] && label="2-hop txn floor $rate/s"
      fi
      if [ "$kind" = table ]; then
        sp50=$cp50; sp99=$cp99; sn=$nsamples; cp50=-; cp99=-
        label="table $rate/s"
      fi
      d=$(echo "$sp99 - $fp99" | bc -l)
      wpct=$(echo "$wcpu * 100 / $ticks / 10" | bc -l); bpct=$(echo "$bcpu * 100 / $ticks / 10" | bc -l)
      mpct=$(echo "($m1 - $m0) * 100 / $ticks / 10" | bc -l); spct=$(echo "($s1 - $s0) * 100 / $ticks / 10" | bc -l)
      printf '  %-22s %-6s %9.3f %9.3f %9.3f %9.3f %9s %9s %11.3f %8d %6.1f %6.1f %7.0f %5.0f\n' "$label" "$r" "$sp50" "$sp99" "$fp50" "$fp99" "$cp50" "$cp99" "$d" "$sn" "$wpct" "$bpct" "$mpct" "$spct"
      res[$kind$rate.p50]="${res[$kind$rate.p50]:-} $sp50"; res[$kind$rate.p99]="${res[$kind$rate.p99]:-} $sp99"
      res[$kind$rate.f50]="${res[$kind$rate.f50]:-} $fp50"; res[$kind$rate.f99]="${res[$kind$rate.f99]:-} $fp99"
      res[$kind$rate.d]="${res[$kind$rate.d]:-} $d"
      if [ "$kind" = eos ]; then
        txns=$(sed -n 's/.*"transactions": \([0-9]*\).*/\1/p' "$dir/pipe_$name.json")
        [ -n "$txns" ] && [ "$txns" -gt 0 ] && printf '  %-22s %-6s the pipe committed %d Kafka transactions, %.3f ms of its CPU each\n' "" "" "$txns" \
          "$(echo "$wcpu * 1000 / $ticks / $txns" | bc -l)"
      fi
      if [ "$kind" = sink ] || [ "$kind" = standby ]; then
        res[$kind$rate.c99]="${res[$kind$rate.c99]:-} $cp99"
        res[$kind$rate.c50]="${res[$kind$rate.c50]:-} $cp50"
      fi
      if [ "$kind" = table ] || [ "$kind" = sink ] || [ "$kind" = standby ]; then
        sql -c "SELECT sdp_stop_flow('$name')" >/dev/null
        drop_flow "$name" "$( [ "$kind" = table ] && echo table || echo sink)"
        [ "$kind" = standby ] && sql -c "ALTER SYSTEM RESET sdp.standby_slots" -c "SELECT pg_reload_conf()" >/dev/null
      fi
    done
  done
done
echo
echo "Medians over the rounds (ms)"
printf '  %-22s %9s %9s %9s %9s %11s %14s\n' "case" "P50" "P99" "floor P50" "floor P99" "P99 - floor" "sink commit P99"
for rate in $rates; do
  for kind in table sink standby hop2 eos; do
    [ -n "${res[$kind$rate.p99]:-}" ] || continue
    label=$kind; [ "$kind" = hop2 ] && label="2-hop floor"; [ "$kind" = eos ] && label="2-hop txn floor"; [ "$kind" = standby ] && label="sink+standby"
    printf '  %-22s %9.3f %9.3f %9.3f %9.3f %11.3f %14s\n' "$label $rate/s" \
      "$(echo "${res[$kind$rate.p50]}" | median)" "$(echo "${res[$kind$rate.p99]}" | median)" \
      "$(echo "${res[$kind$rate.f50]}" | median)" "$(echo "${res[$kind$rate.f99]}" | median)" \
      "$(echo "${res[$kind$rate.d]}" | median)" "$( [ -n "${res[$kind$rate.c99]:-}" ] && echo "${res[$kind$rate.c99]}" | median || echo -)"
  done
done
for rate in $rates; do
  [ -n "${res[standby$rate.p99]:-}" ] && printf '  %-22s sink+standby - sink (medians): to consumer P50 %+.3f, P99 %+.3f; to commit P50 %+.3f, P99 %+.3f\n' "sink $rate/s" \
    "$(echo "$(echo "${res[standby$rate.p50]}" | median) - $(echo "${res[sink$rate.p50]}" | median)" | bc -l)" \
    "$(echo "$(echo "${res[standby$rate.p99]}" | median) - $(echo "${res[sink$rate.p99]}" | median)" | bc -l)" \
    "$(echo "$(echo "${res[standby$rate.c50]}" | median) - $(echo "${res[sink$rate.c50]}" | median)" | bc -l)" \
    "$(echo "$(echo "${res[standby$rate.c99]}" | median) - $(echo "${res[sink$rate.c99]}" | median)" | bc -l)"
  [ -n "${res[hop2$rate.p99]:-}" ] && printf '  %-22s sink P99 - 2-hop floor P99 (medians): %.3f\n' "sink $rate/s" \
    "$(echo "$(echo "${res[sink$rate.p99]}" | median) - $(echo "${res[hop2$rate.p99]}" | median)" | bc -l)"
  [ -n "${res[eos$rate.p99]:-}" ] && printf '  %-22s sink P99 - 2-hop txn floor P99 (medians): %.3f\n' "sink $rate/s" \
    "$(echo "$(echo "${res[sink$rate.p99]}" | median) - $(echo "${res[eos$rate.p99]}" | median)" | bc -l)"
done
echo
fi

if [[ " $parts " == *" throughput "* ]]; then
tools/flight_sim --bootstrap "$boot" --topic tput --aircraft "$n" --count "$n" --rate 0 --linger-ms "${SINK_LINGER_MS:-100}" --quiet > /dev/null
declare -A cpu rate batch
for r in $(seq "$runs"); do
  order="table sink"; [ $((r % 2)) -eq 0 ] && order="sink table"
  for kind in $order; do
    name="tput_${kind}_$r"
    if [ "$kind" = table ]; then o="out_$name"; else o="tput_out$r"; fi
    make_flow "$kind" "$name" tput "$o" "1 minute" '{"starting_offsets": "earliest"}'
    until [ "$(sql -c "SELECT coalesce(messages_read, 0) > 0 FROM sdp.flow_status WHERE flow = '$name'")" = t ]; do sleep 0.01; done
    t0=$(now)
    until [ "$(sql -c "SELECT coalesce(messages_read, 0) >= $n AND NOT EXISTS (SELECT FROM sdp.outbox o JOIN sdp.flows f ON f.id = o.flow_id WHERE f.name = '$name')
                       FROM sdp.flow_status WHERE flow = '$name'")" = t ]; do
      [ "$(sql -c "SELECT state FROM sdp.flow_status WHERE flow = '$name'")" = failed ] && { echo "flow $name failed" >&2; exit 1; }
      sleep 0.01
    done
    t1=$(now)
    pid=$(sql -c "SELECT pid FROM sdp.flow_status WHERE flow = '$name'")
    t=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    nb=$(sql -c "SELECT batches FROM sdp.flow_status WHERE flow = '$name'")
    cpu[$kind]="${cpu[$kind]:-} $(echo "$t * 1000000 / $ticks / $n" | bc -l)"
    rate[$kind]="${rate[$kind]:-} $(echo "$n / ($t1 - $t0)" | bc -l)"
    batch[$kind]="${batch[$kind]:-} $(echo "$n / $nb" | bc -l)"
    sql -c "SELECT sdp_stop_flow('$name')" >/dev/null
    drop_flow "$name" "$kind"
    sleep 1
  done
done
echo "Throughput: a backlog of $n events (8 partitions) drained by a new flow; medians of $runs runs"
echo "  (sink: until its outbox is empty; CPU = user + system of the worker process, librdkafka's threads included)"
printf '  %-34s %12s %12s %12s   %s\n' case "events/s" "CPU ms/1k" "events/batch" "runs (events/s; CPU ms/1k)"
for kind in table sink; do
  printf '  %-34s %12.0f %12.2f %12.0f   %s; %s\n' "enrich flow, append, to a $kind" "$(echo "${rate[$kind]}" | median)" \
    "$(echo "${cpu[$kind]}" | median)" "$(echo "${batch[$kind]}" | median)" \
    "$(for v in ${rate[$kind]}; do printf '%.0f ' "$v"; done)" "$(for v in ${cpu[$kind]}; do printf '%.2f ' "$v"; done)"
done
fi
} | tee "$report"
echo
echo "saved in $report"
