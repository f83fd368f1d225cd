#!/usr/bin/env bash
# scripts/cassert.sh [MAJOR]: an assert-enabled PostgreSQL (--enable-cassert
# --enable-debug) of that major (15, the default, 17 or 18), built from
# Debian's own source package into its own prefix beside the packaged
# server, once per machine.  Prints the prefix.
#
#   bash scripts/cassert.sh        # 15, from bookworm's postgresql-15
#   bash scripts/cassert.sh 17     # from trixie's postgresql-17
#   bash scripts/cassert.sh 18     # from sid's postgresql-18
#
# The build is cached in $SDP_CASSERT_DIR (default /var/cache/sdp_ext), in
# pgMAJOR-cassert; a later run finds the stamp and reuses it.  On an
# assert-enabled server freed memory is overwritten and Assert() is checked,
# so use-after-free and broken invariants fail loudly instead of passing by
# luck.  Upstream's source is taken as Debian ships it (the .orig tarball of
# the suite's source package, fetched with a deb-src entry for that suite),
# without Debian's patches, which point the installation at the packaged
# server's directories; the server headers, pg_regress and the TAP modules
# (PostgreSQL::Test::Cluster) are installed into the prefix with it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

major=${1:-15}
case $major in
  15) suite=bookworm ;;
  17) suite=trixie ;;
  18) suite=sid ;;
  *) sdp_log "scripts/cassert.sh: PostgreSQL $major is not one this builds (15, 17, 18)"; exit 2 ;;
esac
cache=${SDP_CASSERT_DIR:-/var/cache/sdp_ext}
prefix=$cache/pg$major-cassert
stamp=$prefix/.sdp-built

if [ -f "$stamp" ] && [ -x "$prefix/bin/pg_config" ] &&
   [ -x "$prefix/lib/postgresql/pgxs/src/test/regress/pg_regress" ]; then
  echo "$prefix"
  exit 0
fi

sdp_log "building an assert-enabled PostgreSQL $major into $prefix, from Debian $suite's source (once per machine)"
# a deb-src entry for the suite (scripts/librdkafka.sh adds sid's too)
suite_src() {
  grep -qs "^deb-src .* $suite " /etc/apt/sources.list && return 0
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822: a paragraph with Types: deb-src and Suites: the suite
    awk -v RS= -v s="$suite" '/Types:[^\n]*deb-src/ && $0 ~ ("Suites:[^\n]*" s "( |\n|$)") { found = 1 } END { exit !found }' "$f" && return 0
  done
  return 1
}
if ! suite_src; then
  # bookworm's entry keeps the name earlier versions of this script gave it
  name=sdp-ext-src-$suite; [ "$suite" = bookworm ] && name=sdp-ext-src
  sdp_as_root tee "/etc/apt/sources.list.d/$name.sources" >/dev/null <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  sdp_as_root apt-get update -qq
fi
sdp_install_packages dpkg-dev bison flex libreadline-dev zlib1g-dev libssl-dev pkg-config curl

src=$cache/src-pg$major
sdp_as_root rm -rf "$src" "$prefix"
sdp_as_root mkdir -p "$src"
apt_source() { ( cd "$src" && sdp_as_root apt-get source --download-only -qq "postgresql-$major/$suite" >/dev/null 2>&1 ); }
# The point release before the one the index names, from the same pool: a
# mirror can list a version in its index before (or after) its pool serves
# the files (seen 2026-12-05: trixie's index named 17.12-0+deb13u1, the pool
# had 17.10 and 17.11 only).  The tarball is checked against the sha256 its
# .dsc gives.
pool_source() {
  local indexed upstream rev minor m v dsc sum file
  indexed=$(apt-cache showsrc "postgresql-$major" 2>/dev/null | awk '/^Version:/ {print $2}' | sort -V | tail -1)
  [ -n "$indexed" ] || return 1
  upstream=${indexed%%-*}; rev=${indexed#*-}; minor=${upstream#*.}
  for m in $(seq $((minor - 1)) -1 $((minor > 4 ? minor - 4 : 0))); do
    v=$major.$m-$rev
    dsc=$(curl -fsS "http://deb.debian.org/debian/pool/main/p/postgresql-$major/postgresql-${major}_${v//+/%2b}.dsc" 2>/dev/null) || continue
    read -r sum _ file < <(printf '%s\n' "$dsc" | sed -n '/^Checksums-Sha256:/,/^[A-Z]/p' | grep -E "\.orig\.tar\.")
    [ -n "$file" ] || continue
    sdp_as_root curl -fsS -o "$src/$file" "http://deb.debian.org/debian/pool/main/p/postgresql-$major/$file" || continue
    if [ "$(sha256sum "$src/$file" | cut -d' ' -f1)" = "$sum" ]; then
      sdp_log "the pool does not serve postgresql-$major $indexed, which the index names: building $v instead"
      return 0
    fi
    sdp_as_root rm -f "$src/$file"
  done
  return 1
}
apt_source || { sdp_as_root apt-get update -qq; apt_source; } || pool_source || true
orig=$(find "$src" -maxdepth 1 -name "postgresql-${major}_*.orig.tar.*" | head -1)
[ -n "$orig" ] || { sdp_log "apt-get source postgresql-$major/$suite failed, and no earlier point release was found in the pool"; exit 1; }
tar -C "$src" -xf "$orig"
dir=$(find "$src" -maxdepth 1 -type d -name "postgresql-$major*" | head -1)
(
  cd "$dir"
  # ICU is on by default from 16: left out, as in the 15 build (nothing here needs it)
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
