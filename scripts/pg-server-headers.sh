#!/usr/bin/env bash
# Prints the directory of the PostgreSQL 15 server headers (postgres.h),
# which the tashkent extension is compiled against (internal/pgext builds
# it for the tests; TASHKENT_PG_INCLUDEDIR passes the directory).
#
# Where postgresql-server-dev-15 is installed, that is pg_config's
# directory. Otherwise the package of the same version as the installed
# server is downloaded from Debian and unpacked under
# ~/.cache/tashkent/pg-server-dev/VERSION, without installing it: the
# package depends on clang and LLVM (hundreds of MB, for JIT bitcode
# tashkent does not build), and its newer version would upgrade the
# server. Exits non-zero, saying why, if neither works.
set -euo pipefail

dir=$(pg_config --includedir-server 2>/dev/null || true)
if [ -n "$dir" ] && [ -f "$dir/postgres.h" ]; then
  echo "$dir"
  exit 0
fi

version=$(dpkg-query -W -f='${Version}' postgresql-15 2>/dev/null) || {
  echo "pg-server-headers: PostgreSQL 15 is not installed from Debian (postgresql-15)" >&2
  exit 1
}
root="${XDG_CACHE_HOME:-$HOME/.cache}/tashkent/pg-server-dev/$version"
include="$root/usr/include/postgresql/15/server"
if [ ! -f "$include/postgres.h" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"
  if ! (cd "$tmp" && apt-get download -q "postgresql-server-dev-15=$version" >&2); then
    echo "pg-server-headers: could not download postgresql-server-dev-15=$version (apt-get update, or install it)" >&2
    exit 1
  fi
  mkdir -p "$root"
  dpkg -x "$tmp"/postgresql-server-dev-15_*.deb "$root"
fi
echo "$include"
