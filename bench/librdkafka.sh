#!/usr/bin/env bash
# bench/librdkafka.sh: build a newer librdkafka than Debian 12's (2.0.2) for
# the benchmarks, and print the directory it is installed in.
#
# Debian 12 has only librdkafka 2.0.2, whose main thread spins for the last
# millisecond before each of its timers, and whose transactional producer
# registers a transaction's partitions 1 ms after their first message: about
# 1.9 ms of CPU per Kafka transaction (bench/README.md, "What a Kafka
# transaction costs here").  Fixed in 2.4.0 (the
# spin; the 1 ms wait stays).  Users of newer distributions or of
# Confluent's packages get a fixed one; this script lets the benchmark
# measure what they see.
#
# The only registries this machine reaches are Debian's and npm's, and
# npm's node-rdkafka package carries librdkafka's source (deps/librdkafka).
# The script takes it from there (npm pack), builds the library with what
# the extension uses (SSL and zlib; no Kerberos, libcurl, zstd or external
# lz4, which Debian's package has and the benchmark does not use) and
# installs it into RDKAFKA_CACHE (default /var/cache/sdp_ext), once per
# version.  Then:
#
#   prefix=$(bash bench/librdkafka.sh)
#   RDKAFKA_PREFIX=$prefix bash bench/sink.sh
#
# builds the extension and the tools against it (Makefile, RDKAFKA_PREFIX;
# the library's path is written into them, so the server loads it).  The
# test suite and CI use Debian's librdkafka.
#
#   RDKAFKA_NPM_VERSION=3.6.1   the node-rdkafka release whose librdkafka is
#                               built (3.6.1 carries librdkafka 2.12.0)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

npm_version=${RDKAFKA_NPM_VERSION:-3.6.1}
cache=${RDKAFKA_CACHE:-/var/cache/sdp_ext}
prefix=$cache/librdkafka-node-rdkafka-$npm_version

if [ -f "$prefix/lib/librdkafka.so" ]; then
  echo "$prefix"
  exit 0
fi

if command -v npm >/dev/null; then
  sdp_install_packages libssl-dev zlib1g-dev pkg-config >&2
else
  sdp_install_packages npm libssl-dev zlib1g-dev pkg-config >&2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sdp_log "fetching node-rdkafka@$npm_version from the npm registry for its librdkafka" >&2
(cd "$work" && npm pack --silent "node-rdkafka@$npm_version" >/dev/null)
tar -C "$work" -xzf "$work"/node-rdkafka-"$npm_version".tgz package/deps/librdkafka
src=$work/package/deps/librdkafka
sdp_log "building librdkafka $(sed -n 's/^# librdkafka v\([0-9.]*\).*/\1/p' "$src/CHANGELOG.md" | head -1) into $prefix" >&2
(
  cd "$src"
  ./configure --prefix="$prefix" --disable-gssapi --disable-curl \
      --disable-zstd --disable-lz4-ext
  make -j2 -C src
  make -C src install
) >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
echo "$prefix"
