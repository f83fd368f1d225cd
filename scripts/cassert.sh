#!/usr/bin/env bash
# scripts/cassert.sh: an assert-enabled PostgreSQL 15 (--enable-cassert
# --enable-debug), built from Debian's source package into its own prefix
# beside the packaged server, once per machine.  Prints the prefix.
#
# The build is cached in $SDP_CASSERT_DIR (default /var/cache/sdp_ext); a
# later run finds the stamp and reuses it.  On an assert-enabled server freed
# memory is overwritten and Assert() is checked, so use-after-free and broken
# invariants fail loudly instead of passing by luck.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

cache=${SDP_CASSERT_DIR:-/var/cache/sdp_ext}
prefix=$cache/pg15-cassert
stamp=$prefix/.sdp-built

if [ -f "$stamp" ] && [ -x "$prefix/bin/pg_config" ] &&
   [ -x "$prefix/lib/postgresql/pgxs/src/test/regress/pg_regress" ]; then
  echo "$prefix"
  exit 0
fi

sdp_log "building an assert-enabled PostgreSQL 15 into $prefix (once per machine)"
# Debian's source packages: a deb-src entry for bookworm's main archive.
# a deb-src entry for bookworm itself (scripts/librdkafka.sh adds one for sid only)
bookworm_src() {
  grep -qs '^deb-src .* bookworm ' /etc/apt/sources.list && return 0
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: a paragraph with Types: deb-src and Suites: bookworm
    awk -v RS= '/Types:[^\n]*deb-src/ && /Suites:[^\n]*bookworm( |\n|$)/ { found = 1 } END { exit !found }' "$f" && return 0
  done
  return 1
}
if ! bookworm_src; then
  sdp_as_root tee /etc/apt/sources.list.d/sdp-ext-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  sdp_as_root apt-get update -qq
fi
sdp_install_packages dpkg-dev bison flex libreadline-dev zlib1g-dev libssl-dev

src=$cache/src
sdp_as_root rm -rf "$src" "$prefix"
sdp_as_root mkdir -p "$src"
# Upstream's source as Debian ships it (the .orig tarball), without Debian's
# patches, which point the installation at the packaged server's directories.
( cd "$src" && sdp_as_root apt-get source --download-only -qq postgresql-15/bookworm >/dev/null 2>&1 )
orig=$(find "$src" -maxdepth 1 -name 'postgresql-15_*.orig.tar.*' | head -1)
[ -n "$orig" ] || { sdp_log "apt-get source postgresql-15 failed"; exit 1; }
tar -C "$src" -xf "$orig"
dir=$(find "$src" -maxdepth 1 -type d -name 'postgresql-15*' | head -1)
(
  cd "$dir"
  ./configure -q --prefix="$prefix" --enable-cassert --enable-debug --enable-tap-tests \
      --with-openssl --without-icu CFLAGS='-O2 -g' >/dev/null
  make -s -j"$(nproc)" >/dev/null 2>&1 || make -s >/dev/null
  make -s install >/dev/null
  # what PGXS's installcheck needs beside the server: pg_regress and the TAP modules
  make -s -C src/test/regress install >/dev/null
  make -s -C src/test/perl install >/dev/null
  make -s -C contrib/postgres_fdw install >/dev/null
)
[ "$("$prefix/bin/pg_config" --pkglibdir)" = "$prefix/lib/postgresql" ] ||
  { sdp_log "the assert-enabled build did not install under $prefix"; exit 1; }
sdp_as_root rm -rf "$src"
date -u +%FT%TZ > "$stamp"
echo "$prefix"
