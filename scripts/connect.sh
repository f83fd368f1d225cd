#!/usr/bin/env bash
# scripts/connect.sh: Kafka Connect with Debezium's PostgreSQL connector, for
# the tests that read real change events (CDC): a Connect worker in
# standalone mode (org.apache.kafka.connect.cli.ConnectStandalone, one JVM,
# its source offsets in a file) with Debezium in a plugin directory of its
# own (plugin.path: Connect loads it in an isolated class loader, so its
# Jackson, PostgreSQL JDBC driver and protobuf do not meet the runtime's).
# Connectors are added through the REST API on a free loopback port.  The
# JSON converter (org.apache.kafka.connect.json.JsonConverter, with schemas)
# is the worker's default for keys and values; a connector may set its own
# (key.converter, value.converter, *.converter.schemas.enable).  Topics are
# created by Connect itself (topic.creation.enable, the worker's default) when
# the connector says how (topic.creation.default.replication.factor and
# .partitions): the brokers of scripts/kafka.sh do not auto-create topics.
#
#   bash scripts/connect.sh fetch      Kafka Connect (connect-runtime, connect-json,
#                                      an SLF4J provider) in $SDP_CONNECT_CACHE/libs and
#                                      Debezium's PostgreSQL connector with its own
#                                      dependencies in $SDP_CONNECT_CACHE/plugins/
#                                      debezium-connector-postgres (Maven), once per
#                                      machine; prints the directory
#   bash scripts/connect.sh fetch-jdbc-sink
#                                      Debezium's JDBC sink connector with its own
#                                      dependencies in $SDP_CONNECT_CACHE/sink-plugins/
#                                      debezium-connector-jdbc (bench/peers.sh), once per
#                                      machine; prints that plugin path
#   bash scripts/connect.sh start DIR --bootstrap HOST:PORT [--exit-with PID] [--plugin-path DIR]
#                                      a worker whose configuration
#                                      (DIR/worker.properties), offsets
#                                      (DIR/offsets) and log (DIR/connect.log) are in
#                                      DIR, its producers and admin client on the
#                                      brokers HOST:PORT; prints CONNECT_URL,
#                                      CONNECT_PORT, CONNECT_PID, CONNECT_LOG and
#                                      CONNECT_OFFSETS as KEY=value lines (also in
#                                      DIR/connect.env) once the REST API answers.
#                                      Started again on a DIR it ran in, it comes back
#                                      on the same port, creates again the connectors
#                                      of DIR/connectors/*.json (a standalone worker
#                                      keeps no connector configuration of its own)
#                                      and they resume from the stored offsets (a
#                                      restart after a crash)
#                --exit-with PID       stop the worker when process PID has exited
#                                      (a test killed before it could stop it)
#                --plugin-path DIR     the worker's plugins (default $SDP_CONNECT_CACHE/plugins,
#                                      Debezium's PostgreSQL connector)
#   bash scripts/connect.sh add DIR FILE.json
#                                      creates (or reconfigures) the connector of FILE
#                                      ({"name": ..., "config": {...}}) on the worker
#                                      of DIR through its REST API, and keeps the file
#                                      as DIR/connectors/NAME.json for a restart
#   bash scripts/connect.sh stop DIR   SIGTERM, then SIGKILL after 30 s; waits
#   bash scripts/connect.sh kill DIR   SIGKILL (a crash), waits
#   bash scripts/connect.sh check      exits 0 (printing the cache) if start can run,
#                                      else says why
#
# One ERROR in the log at every start is expected: Connect's plugin scanner
# cannot load Debezium's CloudEventsConverter (it looks up a JsonConverter
# method that Kafka 4 no longer has); nothing here uses that converter.
#
# The offsets are flushed to DIR/offsets every $SDP_CONNECT_FLUSH_MS ms (Connect's
# default is 60 s): after a kill, a restart sends again what came after the
# last flush (at least once, as with any Connect source).
#
# Variables: SDP_CONNECT_KAFKA_VERSION (default 4.3.0: the Kafka Connect that
# Debezium 3.6 is built for, see below), SDP_CONNECT_DEBEZIUM_VERSION (default
# 3.6.1.Final), SDP_CONNECT_CACHE (default
# /var/cache/sdp_ext/connect-KAFKA-debezium-DEBEZIUM, e.g. connect-4.3.0-debezium-3.6.1),
# SDP_CONNECT_HEAP (default 384m), SDP_CONNECT_FLUSH_MS (default 1000),
# SDP_CONNECT_JAVA (the java to run it with, default java: Java 17 or later).
# Runs as any user once fetched (the cache is read only); fetch as root or with
# write access to the cache.  Needs Java 17, curl, python3 and Maven (fetch only).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

# Kafka Connect 4.3, not the brokers' 4.4: Debezium 3.6 is built against Kafka
# 4.3 and uses classes that Kafka 4.4 moved (org.apache.kafka.common.utils.
# Sanitizer went to ...utils.internals: its tasks fail with NoClassDefFoundError
# at start).  A 4.3 worker talks to
# the 4.4 brokers as any client does.  fetch refuses a pair that does not fit.
kafka_version=${SDP_CONNECT_KAFKA_VERSION:-4.3.0}
debezium_version=${SDP_CONNECT_DEBEZIUM_VERSION:-3.6.1.Final}
cache=${SDP_CONNECT_CACHE:-/var/cache/sdp_ext/connect-$kafka_version-debezium-${debezium_version%.Final}}
heap=${SDP_CONNECT_HEAP:-384m}
flush_ms=${SDP_CONNECT_FLUSH_MS:-1000}
java=${SDP_CONNECT_JAVA:-java}
slf4j_version=2.0.17
plugin=debezium-connector-postgres

die() { sdp_log "$*"; exit 1; }



# mvn dependency:copy-dependencies of the dependencies XML into directory OUT
# (more mvn arguments after it)
mvn_copy() {  # NAME OUT DEPENDENCIES_XML [MVN_ARGS...]
  local tmp
  tmp=$(mktemp -d)
  cat > "$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>sdp_ext</groupId><artifactId>$1</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
$3
  </dependencies>
</project>
POM
  rm -rf "$2"
  if ! (cd "$tmp" && mvn -q -B "${@:4}" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$2") >&2; then
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$tmp"
}

# Whether the plugin's jars (directory PLUGIN) name Kafka classes that the
# worker's (directory LIBS) lack: Connect always loads Kafka's own classes from
# the worker, so a connector built against another Kafka version may find one
# gone.  Says which, and fails, if so.
missing_kafka_classes() {  # PLUGIN LIBS
  python3 - "$1" "$2" <<'PY'
import glob, os, re, sys, zipfile
have = set()
for jar in glob.glob(os.path.join(sys.argv[2], "*.jar")):
    have.update(n[:-6] for n in zipfile.ZipFile(jar).namelist() if n.endswith(".class"))
ref = re.compile(rb"org/apache/kafka/(?:[a-z0-9_]+/)+[A-Z][A-Za-z0-9_$]*")
missing = {}
for jar in glob.glob(os.path.join(sys.argv[1], "*.jar")):
    z = zipfile.ZipFile(jar)
    for n in z.namelist():
        if n.endswith(".class"):
            for m in ref.findall(z.read(n)):
                if m.decode() not in have:
                    missing.setdefault(m.decode(), n)
for cls, user in sorted(missing.items()):
    print(f"==> {cls} (used by {user}) is not in the worker's classpath", file=sys.stderr)
sys.exit(1 if missing else 0)
PY
}

fetch() {
  local stamp=$cache/.sdp-fetched
  if [ -f "$stamp" ]; then echo "$cache"; return; fi
  command -v java >/dev/null || die "java is missing (Java 17: apt-get install openjdk-17-jre-headless)"
  command -v mvn >/dev/null || die "mvn is missing (apt-get install maven)"
  # start asks the worker with curl whether it answers; so do the tests
  command -v curl >/dev/null || sdp_install_packages curl
  sdp_log "fetching Kafka Connect $kafka_version and Debezium $debezium_version from Maven Central into $cache (once per machine)"
  mkdir -p "$cache"
  # The worker: its REST server (Jetty, Jersey), the JSON converter and an SLF4J
  # 2 provider (connect-runtime asks only for slf4j-api 1.7, without a provider:
  # the nearest declaration, 2.x here, wins).  slf4j-simple writes to stderr,
  # which start sends to DIR/connect.log.  No log4j: Connect then has no
  # /admin/loggers levels to change, which the tests do not use.
  mvn_copy connect-worker "$cache/libs" "
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId><version>$kafka_version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId><version>$kafka_version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$slf4j_version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>$slf4j_version</version></dependency>" ||
    die "mvn could not fetch Kafka Connect $kafka_version"
  # The connector, without what the worker provides: the Kafka Connect API and
  # clients (Debezium is built against its own version of them) and SLF4J.
  # Connect's plugin class loader takes those from the worker anyway.
  mvn_copy debezium-postgres "$cache/plugins/$plugin" "
    <dependency><groupId>io.debezium</groupId><artifactId>debezium-connector-postgres</artifactId><version>$debezium_version</version>
      <exclusions>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.slf4j</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>" ||
    die "mvn could not fetch Debezium's PostgreSQL connector $debezium_version"
  ls "$cache/plugins/$plugin/debezium-connector-postgres-"*.jar >/dev/null 2>&1 ||
    die "no debezium-connector-postgres jar in $cache/plugins/$plugin"
  missing_kafka_classes "$cache/plugins/$plugin" "$cache/libs" ||
    die "Debezium $debezium_version does not fit Kafka Connect $kafka_version (set SDP_CONNECT_KAFKA_VERSION to the Kafka that Debezium is built against)"
  chmod -R a+rX "$cache"
  date -u +%FT%TZ > "$stamp"
  echo "$cache"
}

# Debezium's JDBC sink, in a plugin path of its own: the tests' workers do not
# load it.
fetch_jdbc_sink() {
  local dest=$cache/sink-plugins/debezium-connector-jdbc
  # Maven Central served debezium-connector-jdbc 3.6.0.Final but not 3.6.1.Final
  # here (2026-12-05); a plugin has a class loader of its own
  local version=${SDP_CONNECT_JDBC_SINK_VERSION:-3.6.0.Final}
  if [ -f "$dest/.sdp-fetched" ]; then echo "$cache/sink-plugins"; return; fi
  fetch > /dev/null
  sdp_log "fetching Debezium's JDBC sink connector $version from Maven Central into $dest (once per machine)"
  # Debezium's poms name Confluent's repository too, which is not reached
  # here: Maven Central stands for every repository
  mkdir -p "$cache"
  cat > "$cache/central-only.xml" <<'XML'
<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf><url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>
XML
  mvn_copy debezium-jdbc "$dest" "
    <dependency><groupId>io.debezium</groupId><artifactId>debezium-connector-jdbc</artifactId><version>$version</version>
      <exclusions>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.slf4j</groupId><artifactId>*</artifactId></exclusion>
        <exclusion><groupId>org.hibernate</groupId><artifactId>hibernate-agroal</artifactId></exclusion>
        <!-- the worker's Jackson: its JsonConverter's modules (ServiceLoader)
             must see the same com.fasterxml.jackson.databind.Module -->
        <exclusion><groupId>com.fasterxml.jackson.core</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
    <!-- the connection pool it names, hibernate-agroal 7.2.6.Final, is not
         served: 7.2.0.Final's, beside hibernate-core 7.2.6.Final -->
    <dependency><groupId>org.hibernate.orm</groupId><artifactId>hibernate-agroal</artifactId><version>7.2.0.Final</version>
      <exclusions>
        <exclusion><groupId>org.hibernate.orm</groupId><artifactId>hibernate-core</artifactId></exclusion>
      </exclusions>
    </dependency>" -s "$cache/central-only.xml" ||
    die "mvn could not fetch Debezium's JDBC sink connector $version"
  missing_kafka_classes "$dest" "$cache/libs" ||
    die "Debezium's JDBC sink $version does not fit Kafka Connect $kafka_version"
  chmod -R a+rX "$dest"
  date -u +%FT%TZ > "$dest/.sdp-fetched"
  echo "$cache/sink-plugins"
}

# Whether start can run: fetched, a Java 17 or later, curl and python3.
check() {
  [ -f "$cache/.sdp-fetched" ] || die "Kafka Connect is not fetched: run bash scripts/connect.sh fetch (as root)"
  [ "$(sdp_java_major "$java")" -ge 17 ] || die "Kafka Connect $kafka_version needs Java 17 or later ($java)"
  command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
  command -v python3 >/dev/null || die "python3 is missing (apt-get install python3)"
  echo "$cache"
}

# The HTTP status of GET URL (000 if nothing answers)
http_status() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$1" 2>/dev/null || true; }

start() {
  local dir=$1 bootstrap='' parent='' port pid url f connectors=() plugins=$cache/plugins
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --bootstrap) bootstrap=$2; shift ;;
      --exit-with) parent=$2; shift ;;
      --plugin-path) plugins=$2; shift ;;
      *) die "start: unknown option $1" ;;
    esac
    shift
  done
  [ -n "$bootstrap" ] || die "start: --bootstrap HOST:PORT is required"
  check > /dev/null

  mkdir -p "$dir/connectors" "$dir/tmp"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/port" ]; then
    port=$(cat "$dir/port")   # a restart: the same port and offsets
  else
    port=$(sdp_free_ports 1)
    echo "$port" > "$dir/port"
  fi
  # Written at every start: the brokers' address may have changed.
  cat > "$dir/worker.properties" <<PROPS
bootstrap.servers=$bootstrap
listeners=http://127.0.0.1:$port
rest.advertised.host.name=127.0.0.1
rest.advertised.port=$port
offset.storage.file.filename=$dir/offsets
offset.flush.interval.ms=$flush_ms
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
plugin.path=$plugins
# Plugins found by their ServiceLoader manifests (Debezium's and Kafka's jars
# have them) rather than by scanning every class of every jar (the default,
# hybrid_warn): on 2 cores 5 s to the REST API and 120 MB of RSS, against 15 s
# and 385 MB.
plugin.discovery=service_load
# connectors may override their clients' settings (producer.override.*)
connector.client.config.override.policy=All
task.shutdown.graceful.timeout.ms=10000
PROPS
  for f in "$dir"/connectors/*.json; do
    [ -e "$f" ] && connectors+=("$f")
  done

  # C1 only and the serial collector, as scripts/registry.sh: a worker with
  # one connector starts faster and uses less memory and fewer threads than
  # with the JVM's defaults.  Its own session, so that a signal to a test's
  # process group does not reach it.
  setsid "$java" -Xms64m -Xmx"$heap" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Djava.awt.headless=true -Djava.io.tmpdir="$dir/tmp" \
    -Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
    -Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn \
    -Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.config=warn \
    -Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.runtime.isolation=warn \
    -Dorg.slf4j.simpleLogger.log.org.eclipse.jetty=warn \
    -Dorg.slf4j.simpleLogger.log.org.glassfish=warn \
    -cp "$cache/libs/*" org.apache.kafka.connect.cli.ConnectStandalone \
    "$dir/worker.properties" ${connectors[@]+"${connectors[@]}"} \
    >> "$dir/connect.log" 2>&1 < /dev/null &
  pid=$!
  echo "$pid" > "$dir/connect.pid"
  url=http://127.0.0.1:$port
  for _ in $(seq 1200); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -20 "$dir/connect.log" >&2
      die "the Connect worker exited while starting (log: $dir/connect.log)"
    fi
    [ "$(http_status "$url/connectors")" = 200 ] && break
    sleep 0.1
  done
  [ "$(http_status "$url/connectors")" = 200 ] ||
    die "the Connect worker did not answer within 120 s (log: $dir/connect.log)"

  if [ -n "$parent" ]; then
    # a watcher in its own session: it ends with the worker or with PID
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
                    kill -TERM "$2" 2>/dev/null
                    for _ in $(seq 30); do kill -0 "$2" 2>/dev/null || exit 0; sleep 1; done
                    kill -KILL "$2" 2>/dev/null' connect-watch "$parent" "$pid" \
      > /dev/null 2>&1 < /dev/null &
  fi

  cat > "$dir/connect.env" <<ENV
CONNECT_URL=$url
CONNECT_PORT=$port
CONNECT_PID=$pid
CONNECT_LOG=$dir/connect.log
CONNECT_OFFSETS=$dir/offsets
ENV
  cat "$dir/connect.env"
}

add() {  # DIR FILE
  local dir=$1 file=$2 name url code
  url=$(sed -n 's/^CONNECT_URL=//p' "$dir/connect.env" 2>/dev/null) || true
  [ -n "$url" ] || die "no Connect worker started in $dir"
  name=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["name"])' "$file") ||
    die "$file is not {\"name\": ..., \"config\": {...}}"
  # PUT /connectors/NAME/config takes the config alone, and creates or updates
  code=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["config"].setdefault("name", c["name"]); print(json.dumps(c["config"]))' "$file" |
         curl -s -o "$dir/tmp/add.out" -w '%{http_code}' --max-time 60 -X PUT \
           -H 'Content-Type: application/json' --data-binary @- "$url/connectors/$name/config") || true
  case $code in
    200|201) ;;
    *) die "PUT /connectors/$name/config: HTTP $code: $(cat "$dir/tmp/add.out" 2>/dev/null)" ;;
  esac
  [ "$(cd "$(dirname "$file")" && pwd)/$(basename "$file")" = "$dir/connectors/$name.json" ] ||
    cp "$file" "$dir/connectors/$name.json"
  cat "$dir/tmp/add.out"; echo
}

# signal SIG to the worker of DIR; with wait, until it has exited
signal() {  # DIR SIG WAIT_SECONDS
  local pid
  pid=$(cat "$1/connect.pid" 2>/dev/null) || return 0
  kill -"$2" "$pid" 2>/dev/null || return 0
  [ "$3" -gt 0 ] || return 0
  for _ in $(seq $(( $3 * 10 ))); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

case ${1:-} in
  fetch) fetch ;;
  fetch-jdbc-sink) fetch_jdbc_sink ;;
  check) check ;;
  start) [ $# -ge 2 ] || die "usage: scripts/connect.sh start DIR --bootstrap HOST:PORT [--exit-with PID]"
         dir=$2; shift 2; start "$dir" "$@" ;;
  add)   [ $# -eq 3 ] || die "usage: scripts/connect.sh add DIR FILE.json"; add "$2" "$3" ;;
  stop)  [ $# -eq 2 ] || die "usage: scripts/connect.sh stop DIR"
         signal "$2" TERM 30 || signal "$2" KILL 10 ;;
  kill)  [ $# -eq 2 ] || die "usage: scripts/connect.sh kill DIR"; signal "$2" KILL 10 ;;
  *) die "usage: scripts/connect.sh fetch | fetch-jdbc-sink | check | start DIR --bootstrap HOST:PORT [--exit-with PID] | add DIR FILE.json | stop DIR | kill DIR" ;;
esac
