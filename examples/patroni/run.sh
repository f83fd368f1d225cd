#!/usr/bin/env bash
# examples/patroni/run.sh: sdp_ext under Patroni, and a failover mid-stream.
#
#   bash examples/patroni/run.sh [PG_BIN_DIR]
#
# PG_BIN_DIR: PostgreSQL 15's binaries, with sdp_ext installed for them
# (default /usr/lib/postgresql/15/bin, Debian's; install sdp_ext there with
# `make install`, or `make PG_CONFIG=PG_BIN_DIR/pg_config install` elsewhere).
# Needs Debian's packages patroni and etcd-server (apt-get install -y
# patroni etcd-server), and the repository's tools (built with `make tools`
# if they are missing).  Run it as root: etcd, Patroni and PostgreSQL run
# as the postgres OS user, in a temporary directory.  See README.md here.
#
# What it does, all on 127.0.0.1:
#   1. starts a one-member etcd and two Patroni nodes (patroni0.yml,
#      patroni1.yml): node0 initialises the cluster and leads, node1 is
#      cloned from it and streams from it (asynchronous replication);
#   2. starts the embedded Kafka broker (tools/sdp_broker), and on the leader
#      creates the extension, a source and a stateless append flow whose
#      target keeps kafka_partition and kafka_offset; they replicate to node1,
#      where the flow shows 'standby' and nothing runs;
#   3. produces SDP_COUNT flight positions at SDP_RATE/s (tools/flight_sim)
#      and, once the leader has SDP_KILL_AT rows, kills the leader node:
#      SIGKILL of its Patroni and of its postmaster at once, as when the
#      machine dies;
#   4. measures the time from that SIGKILL until Patroni on node1 holds the
#      leader key, until node1 accepts writes, and until the flow runs on it
#      (sdp.flow_status.state = 'running', polled);
#   5. waits for the producer to finish and the flow to consume everything,
#      and checks on the new leader that every (partition, offset) the
#      producer wrote is in the target exactly once;
#   6. counts what node0 had committed (a PostgreSQL started by hand on its
#      data directory, without sdp_ext), then starts node0's Patroni again:
#      it rewinds node0 (pg_rewind) and makes it a replica of node1, where
#      the flow shows 'standby' and the target has the same rows.
# With SDP_KILL=postmaster only node0's postmaster is killed: its Patroni,
# which still holds the leader key, starts it again in place (no failover),
# and the same checks run on node0.
#
# Everything it started is stopped, and the temporary directory removed, on
# exit (SDP_KEEP=1 keeps the directory, with the logs).  Exit status 0 only
# if the counts are exact and the other node is a streaming replica at the end.
#
#   SDP_COUNT=40000 SDP_RATE=2000 SDP_KILL_AT=8000   messages, per second, and
#                      how many rows the leader has when it is killed
#   SDP_KILL=node      node (Patroni and postmaster) or postmaster
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin_dir=${1:-/usr/lib/postgresql/15/bin}
count=${SDP_COUNT:-40000}
rate=${SDP_RATE:-2000}
kill_at=${SDP_KILL_AT:-8000}
partitions=4
kill_mode=${SDP_KILL:-node}
case $kill_mode in node|postmaster) ;; *) echo "SDP_KILL is node or postmaster" >&2; exit 2 ;; esac

say() { printf '%s  %s\n' "$(date -u +%H:%M:%S.%3N)" "$*"; }
die() { say "FAILED: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# ---------------------------------------------------------------------------
# What it needs
# ---------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "run it as root (PostgreSQL, Patroni and etcd run as the postgres OS user)"
id postgres >/dev/null 2>&1 || die "no postgres OS user (apt-get install postgresql-common creates it)"
for c in patroni patronictl etcd curl setpriv; do
  command -v "$c" >/dev/null || die "$c is missing: apt-get install -y patroni etcd-server curl"
done
for c in postgres pg_ctl psql initdb pg_basebackup pg_rewind; do
  [ -x "$bin_dir/$c" ] || die "$bin_dir/$c is missing (give the PostgreSQL 15 bin directory as the argument)"
done
if [ -x "$bin_dir/pg_config" ]; then
  [ -f "$("$bin_dir/pg_config" --pkglibdir)/sdp_ext.so" ] ||
    die "sdp_ext is not installed for $bin_dir: make PG_CONFIG=$bin_dir/pg_config install"
fi
if [ ! -x "$root/tools/sdp_broker" ] || [ ! -x "$root/tools/flight_sim" ]; then
  say "building the tools (make tools)"
  make -s -C "$root" -j2 tools >/dev/null
fi

# The ports are those of the configuration files.
pg_port=("$(sed -n '/^postgresql:/,$s/^  listen: 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$here/patroni0.yml")"
         "$(sed -n '/^postgresql:/,$s/^  listen: 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$here/patroni1.yml")")
api_port=("$(sed -n '/^restapi:/,/^$/s/^  listen: 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$here/patroni0.yml")"
          "$(sed -n '/^restapi:/,/^$/s/^  listen: 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$here/patroni1.yml")")
etcd_port=$(sed -n 's/^  hosts: 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$here/patroni0.yml")
etcd_peer_port=$((etcd_port + 1))
dcs_setting() { sed -n "s/^    $1: \([0-9]*\).*/\1/p" "$here/patroni0.yml"; }
timing="ttl $(dcs_setting ttl) s, loop_wait $(dcs_setting loop_wait) s, retry_timeout $(dcs_setting retry_timeout) s"
for p in "${pg_port[@]}" "${api_port[@]}" "$etcd_port" "$etcd_peer_port"; do
  [[ $p =~ ^[0-9]+$ ]] || die "could not read the ports from patroni0.yml and patroni1.yml"
  if ss -Htln "sport = :$p" | grep -q .; then die "port $p on this machine is in use"; fi
done

# ---------------------------------------------------------------------------
# The temporary directory, and stopping everything on exit
# ---------------------------------------------------------------------------
dir=$(mktemp -d /tmp/sdp_patroni.XXXXXX)
chmod 755 "$dir"
mkdir -p "$dir/node0" "$dir/node1" "$dir/etcd"
for n in 0 1; do
  sed -e "s|@DIR@|$dir|g" -e "s|@BIN_DIR@|$bin_dir|g" "$here/patroni$n.yml" > "$dir/patroni$n.yml"
done
chown -R postgres:postgres "$dir"
chmod 700 "$dir/node0" "$dir/node1" "$dir/etcd"

etcd_pid='' broker_pid='' sim_pid=''
patroni_pid=('' '')

# A command as the postgres OS user.  setpriv and env exec it, so that for
# "${as_pg[@]}" cmd & (not a shell function, which would fork a subshell)
# $! is its pid.
as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups env HOME="$dir")

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# The postmaster's pid of node N, if it runs.
postmaster_of() {
  local f="$dir/node$1/data/postmaster.pid" pid
  [ -f "$f" ] || return 1
  pid=$(head -1 "$f")
  alive "$pid" && [ "$(readlink "/proc/$pid/cwd")" = "$dir/node$1/data" ] && echo "$pid"
}

# Waits until no process has node N's data directory as its working
# directory: the postmaster and all its children are gone.
wait_node_gone() {
  local d="$dir/node$1/data" p busy
  for _ in $(seq 600); do
    busy=0
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/cwd" 2>/dev/null)" = "$d" ] && { busy=1; break; }
    done
    [ $busy = 0 ] && return 0
    sleep 0.05
  done
  return 1
}

cleanup() {
  local status=$? n pm
  set +e
  trap - EXIT INT TERM
  alive "$sim_pid" && { kill -KILL "$sim_pid"; wait "$sim_pid" 2>/dev/null; }
  for n in 0 1; do alive "${patroni_pid[$n]}" && kill -TERM "${patroni_pid[$n]}"; done
  for _ in $(seq 300); do   # Patroni stops its PostgreSQL, then exits
    alive "${patroni_pid[0]}" || alive "${patroni_pid[1]}" || break
    sleep 0.1
  done
  for n in 0 1; do
    alive "${patroni_pid[$n]}" && kill -KILL "${patroni_pid[$n]}"
    pm=$(postmaster_of "$n") && kill -KILL "$pm" && wait_node_gone "$n"
  done
  alive "$etcd_pid" && kill -TERM "$etcd_pid"
  alive "$broker_pid" && kill -TERM "$broker_pid"
  wait 2>/dev/null
  if [ "${SDP_KEEP:-0}" = 1 ]; then
    say "kept $dir (logs: node*/patroni.log, node*/postgresql.log, etcd.log)"
  else
    rm -rf "$dir"
  fi
  say "stopped everything this script started"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# psql on node N as the postgres superuser (unix socket, peer authentication)
sql() {
  local n=$1; shift
  "${as_pg[@]}" "$bin_dir/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir/node$n" -p "${pg_port[$n]}" \
    -U postgres -d postgres -c "$*"
}
# the HTTP status of Patroni's REST API of node N at PATH (000 if it does not answer)
api() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:${api_port[$1]}$2" || true; }
# waits up to $1 seconds for the command that follows to succeed
wait_until() {
  local t=$1 deadline; shift
  deadline=$(awk -v n="$(now)" -v t="$t" 'BEGIN { printf "%.3f", n + t }')
  until "$@" >/dev/null 2>&1; do
    awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && return 1
    sleep 0.1
  done
}
sql_true() { [ "$(sql "$@" 2>/dev/null)" = t ]; }
api_is() { [ "$(api "$1" "$2")" = 200 ]; }
patronictl_list() { patronictl -c "$dir/patroni1.yml" list 2>/dev/null | sed 's/^/    /'; }
start_patroni() {
  "${as_pg[@]}" patroni "$dir/patroni$1.yml" >> "$dir/node$1/patroni.log" 2>&1 &
  patroni_pid[$1]=$!
}
consumed_sql="SELECT coalesce(sum((p->>'committed_offset')::bigint), 0) FROM sdp.flow_status s,
  jsonb_array_elements(s.partitions) p WHERE s.flow = 'events_flow'"

say "PostgreSQL binaries: $bin_dir ($("$bin_dir/postgres" --version)); $(patroni --version); etcd $(etcd --version | sed -n 's/^etcd Version: //p')"
say "working directory $dir"

# ---------------------------------------------------------------------------
# 1. etcd and the two Patroni nodes
# ---------------------------------------------------------------------------
say "starting etcd on 127.0.0.1:$etcd_port"
"${as_pg[@]}" etcd --name sdp-demo --data-dir "$dir/etcd/data" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "sdp-demo=http://127.0.0.1:$etcd_peer_port" --initial-cluster-state new \
  --initial-cluster-token sdp-demo > "$dir/etcd.log" 2>&1 &
etcd_pid=$!
etcd_healthy() { curl -s -m 2 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"'; }
wait_until 30 etcd_healthy || die "etcd did not start: $(tail -3 "$dir/etcd.log")"

say "starting Patroni node0 (initialises the cluster: initdb, sdp_ext preloaded)"
start_patroni 0
wait_until 120 api_is 0 /primary || die "node0 did not become the leader: $(tail -5 "$dir/node0/patroni.log")"
say "starting Patroni node1 (pg_basebackup from node0, then streams from it)"
start_patroni 1
wait_until 180 api_is 1 /replica || die "node1 did not become a replica: $(tail -5 "$dir/node1/patroni.log")"
wait_until 60 sql_true 0 "SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'" ||
  die "node1 does not stream from node0"
patronictl_list

# ---------------------------------------------------------------------------
# 2. The broker, the source and the flow
# ---------------------------------------------------------------------------
"$root/tools/sdp_broker" --exit-with-parent --quiet --topic "raw-flights:$partitions" \
  --addr-file "$dir/broker.addr" > "$dir/broker.log" 2>&1 &
broker_pid=$!
wait_until 10 test -s "$dir/broker.addr" || die "the broker did not start: $(cat "$dir/broker.log")"
bootstrap=$(cat "$dir/broker.addr")
say "Kafka (embedded broker) at $bootstrap, topic raw-flights with $partitions partitions"

say "on the leader (node0): CREATE EXTENSION sdp_ext, the source, the table and the flow"
sql 0 "CREATE EXTENSION sdp_ext" >/dev/null
sql 0 "CREATE TABLE events (seq bigint, icao24 text, lat float8, lon float8,
                            kafka_partition int, kafka_offset bigint)" >/dev/null
# the embedded broker answers a fetch that finds no data only after fetch.wait.max.ms
sql 0 "SELECT sdp_create_source('flights', '$bootstrap', 'raw-flights', '{\"fetch.wait.max.ms\": \"1\"}')" >/dev/null
sql 0 "SELECT sdp_create_flow('events_flow', 'flights', 'events',
         'seq bigint, icao24 text, lat float8, lon float8', options => '{\"mode\": \"append\"}')" >/dev/null
wait_until 60 sql_true 0 "SELECT state = 'running' FROM sdp.flow_status WHERE flow = 'events_flow'" ||
  die "the flow does not run on node0"
wait_until 60 sql_true 1 "SELECT state = 'standby' FROM sdp.flow_status WHERE flow = 'events_flow'" ||
  die "the flow did not replicate to node1"
say "node0: events_flow is $(sql 0 "SELECT state FROM sdp.flow_status WHERE flow = 'events_flow'");" \
  "node1: $(sql 1 "SELECT state FROM sdp.flow_status WHERE flow = 'events_flow'")," \
  "$(sql 1 "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sdp%'") sdp_ext processes running there"

# ---------------------------------------------------------------------------
# 3. Stream, and kill the leader mid-stream
# ---------------------------------------------------------------------------
say "producing $count flight positions at $rate/s (flight_sim, linger.ms 20)"
"$root/tools/flight_sim" --bootstrap "$bootstrap" --topic raw-flights --count "$count" --rate "$rate" \
  --linger-ms 20 --aircraft 300 --seed 7 --quiet > "$dir/flight_sim.out" 2> "$dir/flight_sim.err" &
sim_pid=$!
wait_until 120 sql_true 0 "SELECT count(*) >= $kill_at FROM events" || die "the flow does not write on node0"
before=$(sql 0 "SELECT count(*) FROM events")
postmaster_dead=$(postmaster_of 0) || die "no postmaster for node0"
if [ "$kill_mode" = node ]; then
  patroni_dead=${patroni_pid[0]}
  t_kill=$(now)
  kill -KILL "$patroni_dead" "$postmaster_dead"
  wait "$patroni_dead" 2>/dev/null || true   # (reaps it, without the shell's "Killed" notice)
  patroni_pid[0]=''
  say "SIGKILL to node0's Patroni (pid $patroni_dead) and postmaster (pid $postmaster_dead);" \
    "a query just before saw $before rows on node0"
else
  t_kill=$(now)
  kill -KILL "$postmaster_dead"
  say "SIGKILL to node0's postmaster (pid $postmaster_dead) only: its Patroni lives on;" \
    "a query just before saw $before rows on node0"
fi
wait_node_gone 0 || die "node0's PostgreSQL processes did not exit"
say "node0's PostgreSQL processes are gone ($(elapsed "$t_kill" "$(now)") s after the SIGKILL)"
if [ "$kill_mode" = node ]; then
  # what node1 replays of the WAL it received ends within milliseconds
  replay_lsn=''
  for _ in $(seq 20); do
    lsn=$(sql 1 "SELECT pg_last_wal_replay_lsn()")
    [ "$lsn" = "$replay_lsn" ] && break
    replay_lsn=$lsn
    sleep 0.1
  done
  replicated=$(sql 1 "SELECT count(*) FROM events")
  say "node1, still a replica, has replicated $replicated rows, and offsets adding up to $(sql 1 "$consumed_sql")"
fi

# ---------------------------------------------------------------------------
# 4. The failover, timed
# ---------------------------------------------------------------------------
# Polls both nodes until one is a primary whose flow runs: node1 after a
# failover, node0 if its Patroni restarted it in place.
t_promoted='' t_running='' new=''
deadline=$(awk -v n="$t_kill" 'BEGIN { printf "%.3f", n + 120 }')
while [ -z "$t_running" ]; do
  awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' &&
    die "no flow runs on a primary 120 s after the SIGKILL: $(tail -5 "$dir/node1/patroni.log")"
  for n in 1 0; do
    r=$(sql $n "SELECT pg_is_in_recovery(), (SELECT state = 'running' AND partitions IS NOT NULL
                FROM sdp.flow_status WHERE flow = 'events_flow')" 2>/dev/null) || r=''
    t=$(now)
    [ -z "$t_promoted" ] && [ "${r%%|*}" = f ] && t_promoted=$t
    if [ "$r" = 'f|t' ]; then t_running=$t; new=$n; break; fi
  done
  [ -n "$t_running" ] || sleep 0.1
done
# The same steps from the logs of the new leader, to the millisecond:
# Patroni's (local time, comma before the milliseconds) and PostgreSQL's
# (log_line_prefix %m: local time, period, zone).
log_time() {  # log_time FILE REGEX: the epoch time of the first matching line after the SIGKILL
  local ts _   # (the logging collector may write the line a little later)
  for _ in $(seq 30); do
    ts=$(awk -v re="$2" -v after="$(date -d "@$t_kill" '+%Y-%m-%d %H:%M:%S.%3N')" '
           { ts = substr($0, 1, 23); sub(",", ".", ts) }
           $0 ~ re && ts >= after { print ts; exit }' "$1")
    [ -n "$ts" ] && { date -d "$ts" +%s.%N; return 0; }
    sleep 0.1
  done
  return 0
}
if [ "$new" = 1 ]; then
  t_lock=$(log_time "$dir/node1/patroni.log" 'promoted self to leader by acquiring session lock')
  lock_label="node1's Patroni takes the expired leader key and promotes (its log)"
  say "node1 is the leader, and its flow runs"
  sleep 1.5   # (for patronictl: Patroni publishes the new timeline on its next cycle)
else
  t_lock=$(log_time "$dir/node0/patroni.log" 'starting as readonly because i had the session lock')
  lock_label="node0's Patroni, holding the leader key, starts PostgreSQL again (its log)"
  say "node0 is still the leader: its Patroni restarted PostgreSQL in place, and its flow runs"
fi
t_ready=$(log_time "$dir/node$new/postgresql.log" 'database system is ready to accept connections')
t_flow=$(log_time "$dir/node$new/postgresql.log" 'sdp flow "events_flow" consuming topic')
patronictl_list
echo
echo "  timeline from the SIGKILL (Patroni $timing):"
line() { [ -n "$2" ] && printf '    %-70s %6s s\n' "$1" "$(elapsed "$t_kill" "$2")"; return 0; }
line "$lock_label" "$t_lock"
line "node$new's PostgreSQL accepts writes (its log)" "$t_ready"
line "the launcher has started events_flow's worker on node$new (its log)" "$t_flow"
line "polled: pg_is_in_recovery() is false on node$new" "$t_promoted"
line "polled: sdp.flow_status says 'running' on node$new" "$t_running"
if [ "$new" = 1 ]; then
  echo "  FAILOVER TIME: $(elapsed "$t_kill" "$t_running") s from the leader's death to the flow running on the new leader"
else
  echo "  NO FAILOVER: $(elapsed "$t_kill" "$t_running") s from the postmaster's death to the flow running again on node0"
fi
echo

# ---------------------------------------------------------------------------
# 5. Exactly once?
# ---------------------------------------------------------------------------
wait "$sim_pid" || die "flight_sim failed: $(tail -3 "$dir/flight_sim.err")"
sim_pid=''
report=$(tail -1 "$dir/flight_sim.out")
delivered=$(sed -n 's/.*"delivered": *\([0-9]*\).*/\1/p' <<< "$report")
say "flight_sim: $report"
[ "$delivered" = "$count" ] || die "flight_sim delivered $delivered of $count"
wait_until 300 sql_true "$new" "SELECT ($consumed_sql) = $delivered" || die "events_flow did not consume everything"
say "events_flow has consumed all $delivered messages on node$new"

ok=1
check() {  # check LABEL GOT WANT
  if [ "$2" = "$3" ]; then printf '    %-46s %18s   ok\n' "$1" "$2"
  else printf '    %-46s %18s   WRONG (want %s)\n' "$1" "$2" "$3"; ok=0; fi
}
echo "  on the leader (node$new):"
IFS='|' read -r rows pairs seqs seq_range < <(sql "$new" "SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)),
  count(DISTINCT seq), min(seq) || '..' || max(seq) FROM events")
check "rows in events" "$rows" "$delivered"
check "distinct (kafka_partition, kafka_offset)" "$pairs" "$delivered"
check "distinct seq" "$seqs" "$delivered"
check "seq range" "$seq_range" "0..$((delivered - 1))"
for p in $(seq 0 $((partitions - 1))); do
  want=$(sed -n "s/.*\"partitions\": *{[^}]*\"$p\": *\([0-9]*\).*/\1/p" <<< "$report")
  got=$(sql "$new" "SELECT count(*) || ' ' || coalesce(min(kafka_offset), -1) || '..' || coalesce(max(kafka_offset), -1)
                    FROM events WHERE kafka_partition = $p")
  check "partition $p: rows, offsets" "$got" "${want:-0} 0..$(( ${want:-0} - 1 ))"
done
check "dead letters" "$(sql "$new" "SELECT count(*) FROM sdp.dead_letters")" 0

# ---------------------------------------------------------------------------
# 6. What node0 had committed, and the old leader rejoins as a replica
# ---------------------------------------------------------------------------
echo
old=$((1 - new))
if [ "$new" = 1 ]; then
  # Not part of a failover: a look at node0's data directory as the SIGKILL
  # left it, through a PostgreSQL started by hand without sdp_ext (no flow
  # runs) and without TCP, to count the commits that never reached node1.
  inspect="-c shared_preload_libraries='' -c listen_addresses='' -c port=${pg_port[0]}"
  inspect+=" -c unix_socket_directories='$dir/node0' -c logging_collector=off"
  if "${as_pg[@]}" "$bin_dir/pg_ctl" -D "$dir/node0/data" -w -t 120 -l "$dir/node0/inspect.log" \
       -o "$inspect" start >/dev/null 2>&1; then
    IFS='|' read -r old_rows old_offsets < <(sql 0 "SELECT count(*), (SELECT sum(next_offset) FROM sdp.offsets) FROM events")
    "${as_pg[@]}" "$bin_dir/pg_ctl" -D "$dir/node0/data" -w -m fast stop >/dev/null
    say "node0's data directory after crash recovery: $old_rows rows, and offsets adding up to $old_offsets"
    [ "$old_rows" -lt "$before" ] &&
      say "  (the query before the SIGKILL saw $before: the last commits' WAL was still in node0's memory," \
        "synchronous_commit = off, and went with it, rows and offsets together)"
    say "  node1 had replicated $((old_rows - replicated)) rows fewer, with their offsets (WAL that node0 had" \
      "not sent yet), and its flow read those messages again from Kafka"
  else
    say "could not start node0's PostgreSQL to look at it: $(tail -3 "$dir/node0/inspect.log")"
  fi
  say "starting node0's Patroni again: pg_rewind, then it follows node1"
  start_patroni 0
fi
rejoined=1
if wait_until 180 api_is "$old" /replica &&
   wait_until 60 sql_true "$new" "SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'" &&
   wait_until 60 sql_true "$old" "SELECT count(*) = $delivered FROM events"; then
  say "node$old is a replica of node$new$(grep -q 'running pg_rewind' "$dir/node$old/patroni.log" && echo ' (after pg_rewind)'):" \
    "$(sql "$old" "SELECT count(*) FROM events") rows, events_flow" \
    "'$(sql "$old" "SELECT state FROM sdp.flow_status WHERE flow = 'events_flow'")'," \
    "$(sql "$old" "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sdp%'") sdp_ext processes"
  patronictl_list
else
  say "node$old is not a streaming replica of node$new: $(tail -5 "$dir/node$old/patroni.log")"
  rejoined=0
fi

echo
what=$([ "$new" = 1 ] && echo "failover" || echo "no failover, restart in place")
if [ $ok = 1 ] && [ $rejoined = 1 ]; then
  echo "RESULT: exact: $delivered messages produced, $rows rows on the leader (node$new), every (partition, offset) once;" \
       "$what: $(elapsed "$t_kill" "$t_running") s"
  exit 0
fi
echo "RESULT: FAILED (counts exact: $([ $ok = 1 ] && echo yes || echo no), node$old a replica: $([ $rejoined = 1 ] && echo yes || echo no))"
exit 1
