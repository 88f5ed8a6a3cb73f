#!/usr/bin/env bash
# One large transaction through the cluster against plain PostgreSQL, in
# one invocation: `pgbench -i -s SCALE` (one loading transaction, streamed
# by tashkent) on a standalone PostgreSQL 15 (synchronous_commit=on, the
# same shared_buffers as a replica), then through replica1 of a 3-replica
# mw cluster, timed until pgbench returns and until every replica applied
# it. Printed: each time and the ratios standalone/cluster (1.0x: as fast).
#
# Usage: scripts/bench-large-load.sh [SCALE] [CERTIFIERS]
#   SCALE: default 100 (10 million rows); CERTIFIERS: 1 (default) or the
#   members of a certifier group (`tashkent up --certifiers N`).
# Needs bin/tashkent (make build), the PostgreSQL 15 binaries, root (to run
# initdb as the postgres user), and the extension's build prerequisites
# (TASHKENT_PG_INCLUDEDIR, as for `make demo`).
set -euo pipefail

scale=${1:-100}
certifiers=${2:-1}
bin=$(cd "$(dirname "$0")/.." && pwd)/bin/tashkent
pgbin=/usr/lib/postgresql/15/bin
dir=$(mktemp -d /tmp/tashkent-large-load-XXXXXX)
chmod 755 "$dir"
cleanup() {
	"$bin" down --data-dir "$dir/c" >/dev/null 2>&1 || true
	if [ -f "$dir/plain/postmaster.pid" ]; then
		runuser -u postgres -- "$pgbin/pg_ctl" -D "$dir/plain" -m fast stop >/dev/null 2>&1 || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.1f}')"; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -m 700 "$dir/plain" && chown postgres "$dir/plain"
touch "$dir/plain.log" && chown postgres "$dir/plain.log"
runuser -u postgres -- "$pgbin/initdb" -D "$dir/plain" -U postgres --auth=trust >/dev/null
runuser -u postgres -- "$pgbin/pg_ctl" -D "$dir/plain" -l "$dir/plain.log" -w \
	-o "-p $port -k $dir/plain -c listen_addresses=127.0.0.1 -c shared_buffers=32MB -c synchronous_commit=on" start >/dev/null
t0=$(now)
"$pgbin/pgbench" -q -i -s "$scale" "postgresql://postgres@127.0.0.1:$port/postgres" >/dev/null 2>&1
t1=$(now)
plain=$(secs "$t0" "$t1")
runuser -u postgres -- "$pgbin/pg_ctl" -D "$dir/plain" -m fast stop >/dev/null

"$bin" up --data-dir "$dir/c" --replicas 3 --certifiers "$certifiers" --no-demo >/dev/null
uri1=$("$bin" status --data-dir "$dir/c" --json | python3 -c "import json,sys; print([r['uri'] for r in json.load(sys.stdin)['replicas'] if r['index']==1][0])")
t0=$(now)
"$pgbin/pgbench" -q -i -s "$scale" "$uri1" >/dev/null 2>&1
t1=$(now)
until "$bin" status --data-dir "$dir/c" --json | python3 -c "import json,sys; s=json.load(sys.stdin); sys.exit(0 if all(r['lag']==0 for r in s['replicas']) else 1)"; do
	sleep 0.2
done
t2=$(now)
committed=$(secs "$t0" "$t1")
applied=$(secs "$t0" "$t2")
ratio() { python3 -c "print(f'{$1 / $2:.2f}x')"; }
echo "pgbench -i -s $scale (one transaction)"
echo "  standalone PostgreSQL (synchronous_commit=on):   ${plain} s"
echo "  tashkent ($certifiers certifier(s)), through replica1 of 3, committed: ${committed} s  ($(ratio "$plain" "$committed") of standalone)"
echo "  tashkent, every replica applied it:              ${applied} s  ($(ratio "$plain" "$applied") of standalone)"
