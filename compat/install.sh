#!/usr/bin/env bash
# Installs what the client compatibility suites (internal/compat, compat/)
# need, from the package registries: the Python clients and ORMs (PyPI), node-postgres
# (npm, from compat/node/package-lock.json) and pgjdbc with the Maven plugins
# (Maven Central). Idempotent: a second run only checks.
#
# Tools it expects (Debian packages in brackets; installed with apt-get when
# missing and running as root): python3 + pip [python3 python3-pip],
# node + npm [nodejs npm], java 17+ [default-jdk-headless], mvn [maven].
set -euo pipefail
cd "$(dirname "$0")"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
need() { # need TOOL DEBIAN-PACKAGES...
  local tool=$1; shift
  command -v "$tool" >/dev/null 2>&1 && return 0
  echo "compat/install.sh: $tool missing: apt-get install $*"
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

need python3 python3 python3-pip
need node nodejs npm
need npm npm
need java default-jdk-headless
need mvn maven

# Python: psycopg 3 and asyncpg; SQLAlchemy, Alembic and Django.
if ! python3 -c 'import psycopg, asyncpg, sqlalchemy, alembic, django' >/dev/null 2>&1; then
  echo "compat/install.sh: pip install -r compat/python/requirements.txt"
  # Debian's own python3 refuses system-wide pip installs (PEP 668) unless told.
  python3 -m pip install -q -r python/requirements.txt 2>/dev/null \
    || python3 -m pip install -q --break-system-packages -r python/requirements.txt
fi

# node-postgres, pg-copy-streams, pg-cursor: exactly the lock file's versions.
if ! (cd node && npm ls --omit=dev >/dev/null 2>&1); then
  echo "compat/install.sh: npm ci in compat/node"
  (cd node && npm ci --no-audit --no-fund --loglevel=error)
fi

# pgjdbc and the Maven plugins: a build fetches them all into ~/.m2.
echo "compat/install.sh: mvn package in compat/java (downloads pgjdbc and plugins the first time)"
(cd java && mvn -q -B -Dstyle.color=never package)

echo "compat/install.sh: ok (python3 $(python3 -c 'import psycopg, asyncpg; print("psycopg", psycopg.__version__, "asyncpg", asyncpg.__version__)'), node $(node --version), $(mvn -v 2>/dev/null | head -1 | sed "s/\x1b\[[0-9;]*m//g"))"
