# scripts/common.sh: shared steps of scripts/demo.sh and scripts/test.sh.
# Sourced, not run.  Everything here must work as root on a new Debian 12
# machine (CI) and as a sudo-capable user on a workstation.

SDP_PG_VERSION=15
SDP_PG_BIN=${SDP_PG_BIN:-/usr/lib/postgresql/$SDP_PG_VERSION/bin}
SDP_PACKAGES=(gcc make postgresql-$SDP_PG_VERSION postgresql-server-dev-$SDP_PG_VERSION
              librdkafka-dev libjansson-dev kcat libipc-run-perl libpq-dev libmicrohttpd-dev
              openssl python3 libcurl4-openssl-dev g++ libprotobuf-dev libprotoc-dev)

sdp_log() { printf '==> %s\n' "$*" >&2; }

# Run a command as root: directly when we are root, else through sudo.
sdp_as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Install the Debian packages that are missing (and only those).
sdp_install_packages() {
  local missing=() p
  for p in "${SDP_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sdp_log "installing ${missing[*]}"
    sdp_as_root apt-get update -qq
    sdp_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# Build the extension and the tools, and install the extension.
# The server is the one in $SDP_PG_BIN (Debian's 15 by default; e.g. an
# assert-enabled build's bin/ of scripts/cassert.sh); objects left by a
# build against another server's headers are built again.
sdp_build_install() {
  local pgc=$SDP_PG_BIN/pg_config
  if [ "$(cat .sdp-built-for 2>/dev/null)" != "$pgc" ]; then
    sdp_log "building against $pgc: objects of an earlier build are built again"
    make -s clean PG_CONFIG="$pgc" >/dev/null
  fi
  sdp_build_tools || return 1
  sdp_log "building sdp_ext"
  make -s -j2 CI="${CI:-}" PG_CONFIG="$pgc" >/dev/null || return 1
  echo "$pgc" > .sdp-built-for
  sdp_log "installing sdp_ext into $("$pgc" --version)"
  sdp_as_root make -s install PG_CONFIG="$pgc" >/dev/null
}

# Build the tools (embedded broker, simulators, dashboard) in tools/.
sdp_build_tools() {
  sdp_log "building the tools"
  make -s -j2 CI="${CI:-}" tools >/dev/null
}

# sdp_build_install_ext DIR PG_CONFIG [MAKE_VAR=...]: build sdp_ext in DIR (a
# copy of the tree) against the PostgreSQL that PG_CONFIG names (and the
# make variables given, e.g. RDKAFKA_PREFIX=...), and install it there.
sdp_build_install_ext() {
  local dir=$1 pgc=$2
  shift 2
  sdp_as_root make -s -C "$dir" -j2 CI="${CI:-}" PG_CONFIG="$pgc" "$@" >/dev/null || return 1
  sdp_as_root make -s -C "$dir" install PG_CONFIG="$pgc" "$@" >/dev/null
}

# A copy of the source tree in a fresh directory owned by the postgres OS
# user, who runs the servers and the tests (the server refuses to run as
# root, and CI's clone belongs to root).  Prints the directory.
sdp_postgres_workdir() {
  local dir
  dir=$(mktemp -d /tmp/sdp_ext.XXXXXX)
  tar --exclude=.git --exclude='tmp_check*' --exclude=results --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
      -cf - . | tar -C "$dir" -xf -
  sdp_as_root chown -R postgres:postgres "$dir"
  chmod 755 "$dir"
  echo "$dir"
}

# Run a command as the postgres OS user with the PostgreSQL binaries first in PATH.
sdp_as_postgres() {
  if [ "$(id -un)" = postgres ]; then
    env PATH="$SDP_PG_BIN:$PATH" "$@"
  else
    sdp_as_root runuser -u postgres -- env PATH="$SDP_PG_BIN:$PATH" HOME=/tmp "$@"
  fi
}

# sdp_initdb DATA SOCKETDIR PORT [MORE]: a throwaway cluster in DATA with
# sdp_ext preloaded for database postgres, reached only by its socket in
# SOCKETDIR on PORT, plus the postgresql.conf lines MORE (not started).
sdp_initdb() {
  sdp_as_postgres initdb -D "$1" -A trust -U postgres >/dev/null
  cat >> "$1/postgresql.conf" <<CONF
shared_preload_libraries = 'sdp_ext'
sdp.database = 'postgres'
port = $3
listen_addresses = ''
unix_socket_directories = '$2'
max_worker_processes = 16
${4:-}
CONF
}

# N distinct free loopback ports, below the kernel's ephemeral range (an
# outgoing connection takes its local port from that range, and could hold a
# port chosen there before the server binds it), each held until all are
# chosen (ports taken one at a time can come out the same).
sdp_free_ports() {
  python3 -c 'import random, socket, sys
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
top = min(low, 32768) - 1
bottom = max(1024, top - 12000)
socks = []
for _ in range(10000):
    if len(socks) == int(sys.argv[1]):
        break
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randint(bottom, top)))
        socks.append(s)
    except OSError:
        s.close()
while len(socks) < int(sys.argv[1]):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()' "$1"
}

# The major version of a java command (17, 21, ...), 0 if it does not run.
sdp_java_major() {
  local v
  v=$("$1" -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | head -1) || true
  echo "${v:-0}"
}
