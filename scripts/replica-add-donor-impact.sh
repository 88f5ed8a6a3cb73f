#!/usr/bin/env bash
# What `tashkent replica add` costs its donor, and how fast it copies.
#
# A 2-replica mw cluster gets about 300 MiB of data (pgbench -s 5 plus a
# bulk table), then pgbench TPC-B runs on the donor (replica1) while a third
# replica is added from it. Printed: the donor's tps before the copy,
# during it and during the new replica's catch-up, as medians of pgbench's
# one-second reports, and the copy's size and rate.
#
# Usage: scripts/replica-add-donor-impact.sh [--max-rate RATE] [--clients N]
# Needs bin/tashkent (make build), pgbench and psql, and the extension's
# build prerequisites (TASHKENT_PG_INCLUDEDIR, as for `make demo`).
set -euo pipefail

maxrate=() clients=4
while [ $# -gt 0 ]; do
	case "$1" in
	--max-rate) maxrate=(--max-rate "$2"); shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	*) echo "usage: $0 [--max-rate RATE] [--clients N]" >&2; exit 2 ;;
	esac
done

bin=$(cd "$(dirname "$0")/.." && pwd)/bin/tashkent
pgbin=/usr/lib/postgresql/15/bin
dir=$(mktemp -d /tmp/tashkent-donor-impact-XXXXXX)
chmod 755 "$dir"
trap '"$bin" down --data-dir "$dir/c" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

"$bin" up --data-dir "$dir/c" --replicas 2 --no-demo >/dev/null
uri() { python3 -c "import json,sys; print([r['uri'] for r in json.load(sys.stdin)['replicas'] if r['index']==$1][0])"; }
uri1=$("$bin" status --data-dir "$dir/c" --json | uri 1)

"$pgbin/pgbench" -q -i -s 5 "$uri1" >/dev/null 2>&1
"$pgbin/psql" -q "$uri1" -c "CREATE TABLE bulk (id int PRIMARY KEY, pad text)"
for i in $(seq 0 7); do
	"$pgbin/psql" -q "$uri1" -c "INSERT INTO bulk SELECT g, repeat(md5(g::text), 8) FROM generate_series($((i * 100000 + 1)), $(((i + 1) * 100000))) g"
done
until "$bin" status --data-dir "$dir/c" --json | python3 -c "import json,sys; s=json.load(sys.stdin); sys.exit(0 if all(r['lag']==0 for r in s['replicas']) else 1)"; do
	sleep 1
done

stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }
pgbench_start=$(date +%s.%N)
"$pgbin/pgbench" -n -c "$clients" -j 2 -T 80 -P 1 -M prepared --max-tries 1000 "$uri1" 2>"$dir/pgbench.log" >/dev/null &
pgbench_pid=$!
sleep 25
"$bin" replica add --data-dir "$dir/c" --donor 1 "${maxrate[@]}" 2>&1 | stamp >"$dir/add.log"
wait "$pgbench_pid"

python3 - "$pgbench_start" "$dir/pgbench.log" "$dir/add.log" <<'EOF'
import re, statistics, sys
start = float(sys.argv[1])
tps = [(start + float(m.group(1)), float(m.group(2)))
       for m in re.finditer(r"progress: ([\d.]+) s, ([\d.]+) tps", open(sys.argv[2]).read())]
add = [l.split(" ", 1) for l in open(sys.argv[3]).read().splitlines()]
t = lambda pat: next(float(ts) for ts, line in add if pat in line)
copy_start, copied, serving = t("copying the data directory"), t(": copied "), t("the replica admits clients")
size = next(line for _, line in add if ": copied " in line).split(": copied ", 1)[1]
def median(lo, hi):
    xs = [v for ts, v in tps if lo < ts <= hi]
    return (statistics.median(xs), len(xs)) if xs else (float("nan"), 0)
before, nb = median(start + 5, copy_start)
during, nd = median(copy_start, copied + 1)
catch, nc = median(copied + 1, serving + 1)
print(f"copy: {size}")
print(f"donor tps (median of 1 s reports): before {before:.0f} ({nb} s), during the copy {during:.0f} ({nd} s, {100 * (during / before - 1):+.0f}%), "
      f"during the catch-up {catch:.0f} ({nc} s)")
EOF
