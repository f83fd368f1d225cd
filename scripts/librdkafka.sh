#!/usr/bin/env bash
# scripts/librdkafka.sh: a current librdkafka, built from Debian's own source
# package of a newer suite, beside Debian 12's 2.0.2; prints the prefix it is
# installed in (cached: built once per machine and version).
#
# Debian 12 ships librdkafka 2.0.2.  Against Apache Kafka 4.x it cannot
# authenticate with SASL SCRAM (it repeats the client nonce in the final
# SCRAM message, which Kafka 4 refuses as invalid credentials; fixed in
# librdkafka 2.6.1), and its transactional producer spins a thread for the
# last millisecond before each timer (about 1.9 ms of CPU per Kafka
# transaction; fixed in 2.4).  Newer Debian suites carry newer releases
# (trixie 2.8, sid 2.14 when this was written): a deb-src entry for the suite,
# apt-get source --download-only (the upstream tarball, as scripts/cassert.sh
# takes PostgreSQL's), and a build with what Debian's own package has (SSL,
# SASL with Kerberos, zlib, zstd, lz4, libcurl for OAuth/OIDC).
#
#   prefix=$(bash scripts/librdkafka.sh)
#   make RDKAFKA_PREFIX=$prefix            # the extension and the tools against it
#   SDP_RDKAFKA=$prefix bash scripts/test.sh   # the suite against it
#
#   SDP_RDKAFKA_SUITE=sid   the Debian suite whose source package is built
#                           (default sid; trixie for 2.8)
#   SDP_RDKAFKA_CACHE=DIR   where it is built and installed (default /var/cache/sdp_ext)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

suite=${SDP_RDKAFKA_SUITE:-sid}
cache=${SDP_RDKAFKA_CACHE:-/var/cache/sdp_ext}
link=$cache/librdkafka-$suite
if [ -f "$link/.sdp-built" ] && [ -f "$link/lib/librdkafka.so" ]; then
  readlink -f "$link"
  exit 0
fi

sources=/etc/apt/sources.list.d/sdp-ext-src-$suite.sources
if [ ! -f "$sources" ]; then
  sdp_log "adding a deb-src entry for Debian $suite (source packages only)" >&2
  sdp_as_root tee "$sources" >/dev/null <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  sdp_as_root apt-get update -qq >&2
fi
sdp_install_packages dpkg-dev pkg-config libssl-dev zlib1g-dev libzstd-dev liblz4-dev libsasl2-dev \
  libcurl4-openssl-dev >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && sdp_as_root apt-get source --download-only -qq "librdkafka/$suite" >/dev/null 2>&1) ||
  { sdp_log "apt-get source librdkafka/$suite failed" >&2; exit 1; }
orig=$(find "$work" -maxdepth 1 -name 'librdkafka_*.orig.tar.*' | head -1)
[ -n "$orig" ] || { sdp_log "no upstream tarball of librdkafka in Debian $suite" >&2; exit 1; }
version=$(basename "$orig" | sed 's/^librdkafka_\([^.]*\.[^.]*\.[^.]*\)\.orig.*/\1/')
prefix=$cache/librdkafka-$version
sdp_log "building librdkafka $version (Debian $suite's source) into $prefix, once per machine" >&2
mkdir "$work/src"
# (the tarball's one directory is named after the upstream commit)
tar -C "$work/src" --strip-components=1 -xf "$orig"
src=$work/src
[ -x "$src/configure" ] || { sdp_log "no configure in librdkafka's source" >&2; exit 1; }
(
  cd "$src"
  ./configure --prefix="$prefix"
  make -j"$(nproc)" -C src
  sdp_as_root make -C src install
) > "$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
sdp_as_root ln -sfn "$prefix" "$link"
date -u +%FT%TZ | sdp_as_root tee "$prefix/.sdp-built" >/dev/null
echo "$prefix"
