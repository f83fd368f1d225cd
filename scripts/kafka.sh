#!/usr/bin/env bash
# scripts/kafka.sh: Apache Kafka itself, for the tests, the demo and the
# benchmarks: a single-node KRaft broker (broker and controller in one JVM)
# on free loopback ports, with four listeners:
#
#   PLAINTEXT       no authentication
#   SASL_SSL        SCRAM-SHA-512 (user sdp, password sdp-secret, created when
#                   the storage is formatted) over TLS
#   SSL             TLS, no client authentication
#   SASL_PLAINTEXT  SCRAM-SHA-512, the same user, without TLS
#
# The broker's certificate (for 127.0.0.1 and localhost) is signed by a CA
# made here with openssl; clients trust it with ssl.ca.location (the file)
# or ssl.ca.pem (its content).  Topics are created explicitly
# (auto.create.topics.enable=false), as on a managed cluster: tools/kafka_admin.
#
#   bash scripts/kafka.sh fetch        the jars (Maven: kafka_2.13, kafka-tools,
#                                      an SLF4J provider), the certificates and a
#                                      formatted storage, once per machine, in
#                                      $SDP_KAFKA_CACHE; prints the directory
#   bash scripts/kafka.sh start DIR    a broker whose data, configuration and log
#                                      are in DIR; prints its addresses as
#                                      KEY=value lines (also in DIR/kafka.env) once
#                                      it answers.  Started again on a DIR it ran
#                                      in, it comes back on the same ports and data
#                                      (a restart after a crash)
#   bash scripts/kafka.sh stop DIR     SIGTERM, then SIGKILL after 30 s; waits
#   bash scripts/kafka.sh kill DIR     SIGKILL (a crash), waits
#   bash scripts/kafka.sh pause DIR    SIGSTOP; resume DIR: SIGCONT
#   bash scripts/kafka.sh codecs DIR TOPIC PARTITION
#                                      how many record batches of the partition the
#                                      broker stored with each compression codec
#   bash scripts/kafka.sh group DIR GROUP
#                                      Kafka's own consumer-group tool (kafka-consumer-groups
#                                      --describe) on the broker of DIR: one line per
#                                      partition the group committed, "TOPIC PARTITION
#                                      CURRENT-OFFSET LOG-END-OFFSET LAG", sorted
#
# Variables: SDP_KAFKA_VERSION (default 4.4.0), SDP_KAFKA_CACHE (default
# /var/cache/sdp_ext/kafka-$SDP_KAFKA_VERSION), SDP_KAFKA_HEAP (default 512m).
# Runs as any user once fetched (the cache is read only); fetch as root or
# with write access to the cache.  Needs Java 17 and Maven (fetch only).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${SDP_KAFKA_VERSION:-4.4.0}
cache=${SDP_KAFKA_CACHE:-/var/cache/sdp_ext/kafka-$version}
heap=${SDP_KAFKA_HEAP:-512m}
scram_user=sdp
scram_password=sdp-secret
tls_password=sdp-tls-secret
# one fixed cluster id: the formatted storage is a template, copied for each broker
cluster_id=c2RwX2V4dC1rYWZrYQ

. scripts/common.sh
log() { printf '==> %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

java_cmd() { java -Xms"$heap" -Xmx"$heap" -cp "$cache/libs/*" "$@"; }



# server.properties for the ports (PLAINTEXT, SASL_SSL, SSL, CONTROLLER, SASL_PLAINTEXT) and data directory
write_properties() {  # FILE DATA PLAIN SASL SSL CTRL SASLPLAIN
  cat > "$1" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$6
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$3,SASL_SSL://127.0.0.1:$4,SSL://127.0.0.1:$5,CONTROLLER://127.0.0.1:$6,SASL_PLAINTEXT://127.0.0.1:$7
advertised.listeners=PLAINTEXT://127.0.0.1:$3,SASL_SSL://127.0.0.1:$4,SSL://127.0.0.1:$5,SASL_PLAINTEXT://127.0.0.1:$7
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$2
# a single node: every internal topic has one replica, and few partitions (they are made on first use)
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# On a busy machine the broker's heartbeats to its own controller come late; past the session
# (9 s by default) the controller fences the broker and its partitions have no leader for 30 s
# and more.  A longer session delays a restart after a crash as much (the controller refuses the
# new registration until the old one's session has ended): 15 s, heartbeats every second.
broker.session.timeout.ms=15000
broker.heartbeat.interval.ms=1000
auto.create.topics.enable=false
num.partitions=1
# retention is looked at every second (tests give topics a small retention.ms)
log.retention.check.interval.ms=1000
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$cache/tls/broker.p12
ssl.keystore.password=$tls_password
ssl.key.password=$tls_password
PROPS
}

fetch() {
  local stamp=$cache/.sdp-fetched tmp
  if [ -f "$stamp" ]; then echo "$cache"; return; fi
  command -v java >/dev/null || die "java is missing (Java 17: apt-get install openjdk-17-jre-headless)"
  command -v mvn >/dev/null || die "mvn is missing (apt-get install maven)"
  command -v openssl >/dev/null || die "openssl is missing (apt-get install openssl)"
  log "fetching Apache Kafka $version from Maven Central into $cache (once per machine)"
  mkdir -p "$cache"
  tmp=$(mktemp -d)
  cat > "$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sdp_ext</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version></dependency>
    <!-- the broker logs through SLF4J; a provider is not among its dependencies -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.17</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>2.0.17</version></dependency>
  </dependencies>
</project>
POM
  rm -rf "$cache/libs"
  (cd "$tmp" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$cache/libs") >&2 ||
    die "mvn could not fetch Apache Kafka $version"
  rm -rf "$tmp"

  log "making the TLS certificates (a CA, and the broker's for 127.0.0.1 and localhost)"
  rm -rf "$cache/tls"; mkdir -p "$cache/tls"
  (
    cd "$cache/tls"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=sdp_ext test CA" \
      -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile san.ext -out broker.pem 2>/dev/null
    openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
      -passout "pass:$tls_password" -out broker.p12
    # a second CA that signed nothing here: what a client trusts when it trusts the wrong one
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=sdp_ext other CA" \
      -keyout other-ca.key -out other-ca.pem 2>/dev/null
    chmod 644 ./*.pem ./*.p12
  )

  log "formatting a template storage (cluster $cluster_id, SCRAM user $scram_user)"
  rm -rf "$cache/template"
  write_properties "$cache/template.properties" "$cache/template" 1 2 3 4
  java_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$cache/template.properties" \
    --add-scram "SCRAM-SHA-512=[name=$scram_user,password=$scram_password]" > "$cache/format.log" 2>&1 ||
    die "could not format the storage"
  chmod -R a+rX "$cache"
  date -u +%FT%TZ > "$stamp"
  echo "$cache"
}

start() {
  local dir=$1 plain sasl ssl ctrl saslplain pid
  [ -f "$cache/.sdp-fetched" ] || die "Apache Kafka is not fetched: run bash scripts/kafka.sh fetch (as root)"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/ports" ]; then
    read -r plain sasl ssl ctrl saslplain < "$dir/ports"   # a restart: the same ports and data
  else
    read -r plain sasl ssl ctrl saslplain < <(sdp_free_ports 5)
    echo "$plain $sasl $ssl $ctrl $saslplain" > "$dir/ports"
    cp -r "$cache/template" "$dir/data"
    write_properties "$dir/server.properties" "$dir/data" "$plain" "$sasl" "$ssl" "$ctrl" "$saslplain"
  fi
  # the JVM options of Kafka's own bin/kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS):
  # G1 aiming at 20 ms pauses (the JVM's default aim is 200 ms); its GC log in DIR/gc.log.
  # Its own session, so that a signal to a test's process group does not reach it.
  setsid java -Xms"$heap" -Xmx"$heap" -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 \
    -Xlog:gc:file="$dir/gc.log":uptime:filecount=2,filesize=5m \
    -Djava.awt.headless=true -Dorg.slf4j.simpleLogger.showDateTime=true \
    -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
    -cp "$cache/libs/*" kafka.Kafka "$dir/server.properties" \
    >> "$dir/kafka.log" 2>&1 < /dev/null &
  pid=$!
  echo "$pid" > "$dir/kafka.pid"
  for _ in $(seq 600); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -20 "$dir/kafka.log" >&2
      die "the broker exited while starting (log: $dir/kafka.log)"
    fi
    grep -q 'Kafka Server started' "$dir/kafka.log" 2>/dev/null && kcat -b "127.0.0.1:$plain" -L -m 1 >/dev/null 2>&1 && break
    sleep 0.1
  done
  kcat -b "127.0.0.1:$plain" -L -m 1 >/dev/null 2>&1 || die "the broker did not answer within 60 s (log: $dir/kafka.log)"
  cat > "$dir/kafka.env" <<ENV
KAFKA_PLAINTEXT=127.0.0.1:$plain
KAFKA_SASL_SSL=127.0.0.1:$sasl
KAFKA_SSL=127.0.0.1:$ssl
KAFKA_SASL_PLAINTEXT=127.0.0.1:$saslplain
KAFKA_CA=$cache/tls/ca.pem
KAFKA_OTHER_CA=$cache/tls/other-ca.pem
KAFKA_USER=$scram_user
KAFKA_PASSWORD=$scram_password
KAFKA_PID=$pid
KAFKA_LOG=$dir/kafka.log
ENV
  cat "$dir/kafka.env"
}

# signal SIG to the broker of DIR; with wait, until it has exited
signal() {  # DIR SIG WAIT_SECONDS
  local pid
  pid=$(cat "$1/kafka.pid" 2>/dev/null) || return 0
  kill -"$2" "$pid" 2>/dev/null || return 0
  [ "$3" -gt 0 ] || return 0
  for _ in $(seq $(( $3 * 10 ))); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

case ${1:-} in
  fetch) fetch ;;
  start) [ $# -eq 2 ] || die "usage: scripts/kafka.sh start DIR"; start "$2" ;;
  stop)  signal "$2" TERM 30 || signal "$2" KILL 10 ;;
  kill)  signal "$2" KILL 10 ;;
  pause) signal "$2" STOP 0 ;;
  codecs) [ $# -eq 4 ] || die "usage: scripts/kafka.sh codecs DIR TOPIC PARTITION"
     # the compression codec of each record batch the broker stored (Kafka's DumpLogSegments)
     java -Xmx128m -cp "$cache/libs/*" org.apache.kafka.tools.DumpLogSegments \
       --files "$(ls "$2/data/$3-$4/"*.log | paste -sd,)" 2>/dev/null |
       sed -n 's/.* compresscodec: \([a-z0-9]*\).*/\1/p' | sort | uniq -c ;;
  resume) signal "$2" CONT 0 ;;
  group) [ $# -eq 3 ] || die "usage: scripts/kafka.sh group DIR GROUP"
     boot=$(sed -n 's/^KAFKA_PLAINTEXT=//p' "$2/kafka.env")
     out=$(java -Xmx128m -cp "$cache/libs/*" org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
       --bootstrap-server "$boot" --describe --group "$3" 2>&1) || die "kafka-consumer-groups failed: $out"
     # the header is "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID"
     awk -v g="$3" '$1 == g && $3 ~ /^[0-9]+$/ { print $2, $3, $4, $5, $6 }' <<< "$out" | sort -k1,1 -k2,2n ;;
  *) die "usage: scripts/kafka.sh fetch | start DIR | stop DIR | kill DIR | pause DIR | resume DIR | codecs DIR TOPIC PARTITION | group DIR GROUP" ;;
esac
