#!/usr/bin/env bash
# bench/window_burst.sh: section 5(b) of bench/run.sh alone, for working on
# window bursts: the delay from a window being finalized (emitted_at) to its
# row being committed (pg_xact_commit_timestamp(xmin)), 1-second windows of
# the same 5 aggregations over live event time at 5,000 events/s.
#
# Usage: bash bench/window_burst.sh [MERCHANTS ...]     (default: 1000)
#   BURST_SECONDS=30   how long the producer runs at each scale
#   BURST_PGBENCH=0    without pgbench reading by key during the 1,000-merchant
#                      run (bench/run.sh runs it, section 5(c))
#   BURST_DETAIL=1     also one line per burst (emitted_at, rows, delay)
#   BURST_LOG=FILE     keep the server's log there
#   BURST_PERF=FILE    perf record -g of the flow's worker into FILE
#   BURST_WORKERS=N    the flow in N workers (the topic has 4 partitions,
#                      keyed by merchant: each window's rows on one)
#   BURST_COPY=0       without the COPY floor: after the flow stops, the
#                      rows of its last 10 full bursts are COPYed back, one
#                      burst per COPY (synchronous_commit off, as the flow
#                      commits), into a copy of the window table holding
#                      every earlier row, with the producer and (at 1,000
#                      merchants, unless BURST_PGBENCH=0) pgbench running
#                      again as they ran beside the flow: what PostgreSQL
#                      itself takes to write and commit a burst's rows here,
#                      without computing them
#   BURST_GEN_BATCH=0  run the broker, the producer and the pgbench client
#                      as ordinary processes.  By default they run as
#                      SCHED_BATCH (chrt --batch 0): they get their share of
#                      the two cores but do not preempt the server at each
#                      of their wake-ups (the producer wakes 5,000 times a
#                      second), as they would not from other machines
#   BURST_TIMING=1     build sdp_ext with -DSDP_BURST_TIMING (src/shmem/metrics.c)
#                      and print, per run, medians over the bursts of the
#                      worker's CPU time firing and writing, and of its time
#                      waiting for a CPU and its preemptions (src/worker/batch.o,
#                      src/shmem/metrics.o and sdp_ext.so are removed before
#                      and after, so that no other build keeps the
#                      instrumentation)
#   SDP_PG_BIN=DIR     use the PostgreSQL in DIR (a private copy: the
#                      extension is installed there with its pg_config)
#                      instead of the system's (which bench/run.sh also uses)
# Results: the same line per scale as bench/run.sh prints.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
. bench/server.sh

merchants_list=${*:-1000}
seconds=${BURST_SECONDS:-30}
port=${BENCH_PORT:-5490}
gen=
[ "${BURST_GEN_BATCH:-1}" = 1 ] && gen="chrt --batch 0"

if [ "${BURST_TIMING:-0}" = 1 ]; then
  export COPT="${COPT:-} -DSDP_BURST_TIMING"
  rm -f src/worker/batch.o src/shmem/metrics.o sdp_ext.so  # PGXS keeps objects .SECONDARY: a missing one alone is not rebuilt
fi
if [ "$SDP_PG_BIN" = "/usr/lib/postgresql/$SDP_PG_VERSION/bin" ]; then
  sdp_install_packages
  sdp_build_install
else
  sdp_build_tools
  make -s -j2 PG_CONFIG="$SDP_PG_BIN/pg_config" CI="${CI:-}" >/dev/null
  make -s install PG_CONFIG="$SDP_PG_BIN/pg_config" >/dev/null
fi

bench_server burst 'track_commit_timestamp = on'
[ -n "${BURST_LOG:-}" ] && bench_on_exit='cp "$dir/postgres.log" "$BURST_LOG"'
[ "${BURST_TIMING:-0}" = 1 ] && bench_on_exit="${bench_on_exit:-true}; rm -f src/worker/batch.o src/shmem/metrics.o sdp_ext.so"
bench_start

topics=()
for m in $merchants_list; do topics+=(--topic "paylive$m:4"); done
$gen tools/sdp_broker "${topics[@]}" --addr-file "$dir/broker.addr" --quiet > "$dir/broker.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/broker.addr" ] && break; sleep 0.1; done
boot=$(cat "$dir/broker.addr")
source_options={}   # bench_broker sets it; this broker is started here
sql -c 'CREATE EXTENSION sdp_ext'


# The write floor of a burst: the flow's last 10 full bursts COPYed back,
# one COPY (one transaction) per burst, into a copy of the table holding
# every earlier row, under the load that ran beside the flow.
copy_floor() {  # flow merchants
  local f=$1 m=$2 t=${1}_copy i=0 times=() e
  mapfile -t bursts < <(sql -c "SELECT emitted_at FROM ${f}_windows GROUP BY emitted_at
      HAVING count(*) >= $m * 4 ORDER BY emitted_at DESC LIMIT 10" | sort)
  [ ${#bursts[@]} -gt 0 ] || return 0
  sql -c "CREATE TABLE $t (LIKE ${f}_windows INCLUDING ALL)"
  sql -c "INSERT INTO $t SELECT * FROM ${f}_windows WHERE emitted_at < '${bursts[0]}'"
  sql -c "VACUUM ANALYZE $t"
  for e in "${bursts[@]}"; do
    i=$((i + 1))
    sql -c "COPY (SELECT * FROM ${f}_windows WHERE emitted_at = '$e') TO '$dir/burst$i.csv' (FORMAT csv)"
  done
  $gen tools/payment_sim --bootstrap "$boot" --topic "$f" --merchants "$m" --rate 5000 \
    --duration 18 --event-time now --linger-ms 1 --quiet > /dev/null &
  local sim=$!
  local bench=
  if [ "$m" = 1000 ] && [ "${BURST_PGBENCH:-1}" = 1 ]; then
    sed "s/FROM ${f}_windows/FROM $t/" "$dir/read.sql" > "$dir/read_copy.sql"
    sdp_as_postgres $gen pgbench -n -h "$dir" -p "$port" -U postgres -c 1 -T 15 -f "$dir/read_copy.sql" postgres > /dev/null 2>&1 &
    bench=$!
  fi
  sleep 3
  # one session COPYs the bursts, half a second apart; the CPU of its backend
  # (user + system, /proc) from its first COPY to its last, per burst
  {
    echo "SET application_name = 'burst_copy'; SET synchronous_commit = off; SELECT pg_sleep(1);"
    echo '\timing on'
    for ((i = 1; i <= ${#bursts[@]}; i++)); do
      echo "COPY $t FROM '$dir/burst$i.csv' (FORMAT csv);"
      echo '\timing off'
      echo "SELECT pg_sleep(0.5);"
      echo '\timing on'
    done
    echo '\timing off'
    echo "SELECT pg_sleep(2) AS copies_done;"
  } > "$dir/copies.sql"
  sql -f "$dir/copies.sql" > "$dir/copies.out" &
  local copier=$! cpid= c0 c1
  until [ -n "$cpid" ]; do sleep 0.1; cpid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'burst_copy'"); done
  c0=$(awk '{print $14 + $15}' "/proc/$cpid/stat")
  until [ "$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'burst_copy' AND query LIKE '%copies_done%'")" = 1 ]; do sleep 0.1; done
  c1=$(awk '{print $14 + $15}' "/proc/$cpid/stat")
  wait "$copier"
  mapfile -t times < <(sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' "$dir/copies.out")
  copy_cpu_ms=$(awk -v c="$((c1 - c0))" -v t="$(getconf CLK_TCK)" -v n="${#bursts[@]}" 'BEGIN { printf "%.1f", c * 1000 / t / n }')
  kill "$sim" 2>/dev/null
  wait "$sim" 2>/dev/null || true
  [ -n "$bench" ] && { wait "$bench" 2>/dev/null || true; }
  [ "${BURST_DETAIL:-0}" = 1 ] && echo "    COPY of each burst, ms: ${times[*]}"
  printf '%s\n' "${times[@]}" | sort -n | awk -v m="$m" '{t[NR] = $1} END {
      printf "  %-62s %.1f / %.1f ms (%d bursts)\n",
        "COPY of one burst'"'"'s rows (the floor), " m " merchants, median / max", t[int((NR + 1) / 2)], t[NR], NR}'
  printf '  %-62s %s ms\n' "COPY of one burst's rows, its backend's CPU, mean" "$copy_cpu_ms"
}

for merchants in $merchants_list; do
  f=paylive$merchants
  logstart=$(wc -l < "$dir/postgres.log")
  make_payments_flow "$f" "$f" "${f}_windows" "1 second" "${BURST_WORKERS:-1}"
  wait_running "$f"
  if [ -n "${BURST_PERF:-}" ]; then  # perf record of the worker, to this file
    wpid=$(sql -c "SELECT pid FROM sdp.flow_status WHERE flow = '$f'")
    perf record -g -o "$BURST_PERF" -p "$wpid" -- sleep $((seconds - 2)) > /dev/null 2>&1 &
  fi
  $gen tools/payment_sim --bootstrap "$boot" --topic "$f" --merchants "$merchants" --rate 5000 \
    --duration "$seconds" --event-time now --linger-ms 1 --quiet > /dev/null &
  sim=$!
  if [ "$merchants" = 1000 ] && [ "${BURST_PGBENCH:-1}" = 1 ]; then
    # as in bench/run.sh: pgbench reads the last 24 windows of a merchant by key meanwhile
    cat > "$dir/read.sql" <<PGB
\\set m random(1, 1000)
SELECT window_start, value, row_count FROM ${f}_windows
 WHERE definition = 'rejection_ratio' AND entity = 'm' || lpad(:m::text, 5, '0')
 ORDER BY window_end DESC LIMIT 24;
PGB
    sleep 3
    sdp_as_postgres $gen pgbench -n -h "$dir" -p "$port" -U postgres -c 1 -T $((seconds - 5)) -f "$dir/read.sql" postgres > /dev/null 2>&1
  fi
  wait "$sim"
  sleep 4
  sql -c "SELECT sdp_stop_flow('$f')" >/dev/null
  read -r d50 d99 dmax dn nb < <(sql -c "SELECT concat_ws(' ',
      round((percentile_cont(0.5) WITHIN GROUP (ORDER BY d))::numeric, 3),
      round((percentile_cont(0.99) WITHIN GROUP (ORDER BY d))::numeric, 3),
      round(max(d)::numeric, 3), count(*), count(DISTINCT emitted_at))
    FROM (SELECT emitted_at, extract(epoch FROM pg_xact_commit_timestamp(xmin) - emitted_at) * 1000 AS d
            FROM ${f}_windows) s")
  printf '  %-62s %s / %s ms (%s rows; max %s ms; %s bursts)\n' \
    "window finalized -> committed, $merchants merchants x 5, P50 / P99" "$d50" "$d99" "$dn" "$dmax" "$nb"
  if [ "${BURST_COPY:-1}" = 1 ]; then
    copy_floor "$f" "$merchants"
  fi
  if [ "${BURST_TIMING:-0}" = 1 ]; then
    # "sdp burst of N rows: operate wall W cpu C runq Q preempted P; write ...; commit ...;"
    tail -n +"$((logstart + 1))" "$dir/postgres.log" | grep -o 'sdp burst of .*' |
      awk -v copy="${copy_cpu_ms:-}" '{ n++; oc[n] = $10; wc[n] = $19; rq[n] = $12 + $21 + $30; pr[n] = $14 + $23 + $32 }
        function med(a,   i, j, t, m) { m = n; for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
        END { if (n) printf "  worker per burst, median of %d: CPU firing %.1f ms, writing %.1f ms; waiting for a CPU %.1f ms; preempted %d times\n",
                             n, med(oc), med(wc), med(rq), med(pr)
              if (n && copy != "") { f = med(oc); w = med(wc)
                printf "  worker per burst, CPU firing + writing beside COPY'"'"'s CPU: %.1f / %s ms = %.2f x\n", f + w, copy, (f + w) / copy } }'
  fi
  if [ "${BURST_DETAIL:-0}" = 1 ]; then
    sql -c "SELECT to_char(emitted_at, 'HH24:MI:SS.MS'), count(*), count(DISTINCT xmin::text),
                   round(min(extract(epoch FROM pg_xact_commit_timestamp(xmin) - emitted_at) * 1000)::numeric, 1),
                   round(max(extract(epoch FROM pg_xact_commit_timestamp(xmin) - emitted_at) * 1000)::numeric, 1)
              FROM ${f}_windows GROUP BY emitted_at ORDER BY emitted_at" |
      awk -F'|' 'BEGIN {print "    emitted_at     rows  xacts  min ms   max ms"} {printf "    %s %6d %6d %7.1f %8.1f\n", $1, $2, $3, $4, $5}'
  fi
done
