#!/bin/bash
# Session 13's A/B of two tashkent binaries on a one-replica cluster without a disk delay:
#   ab-one-replica.sh LABEL BINARY
# starts `BINARY up --replicas 1`, loads TPC-B scale 16 straight into PostgreSQL (as the
# earlier sessions did), then measures
#   - the client backend's CPU per transaction at one client (/proc/PID/stat over 5 s of
#     pgbench -c 1 with tpcb-plus-select.sql through the proxy), and
#   - pgbench -M prepared -c 16 -T 15 through the proxy (tps),
# and stops the cluster. Run it for the two binaries alternately.
set -e
L=$1; B=$2; D=/tmp/tashkent-ab-$L; HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$D"
out=$("$B" up --data-dir "$D" --replicas 1 --no-demo 2>&1)
PG=$(echo "$out" | grep -o "PostgreSQL started (pid [0-9]*, port [0-9]*" | grep -o "port [0-9]*" | awk '{print $2}')
PP=$(echo "$out" | grep -o "proxy started (pid [0-9]*, port [0-9]*" | grep -o "port [0-9]*" | awk '{print $2}')
grep -h "capture installed" "$D"/replica1/proxy.log | grep -o "language=[a-z]*" | head -1
PGOPTIONS="-c session_replication_role=replica" pgbench -h 127.0.0.1 -p "$PG" -U postgres -i -s 16 -I dtgp -q postgres >/dev/null 2>&1
psql -h 127.0.0.1 -p "$PG" -U postgres -qc "ALTER TABLE pgbench_history ADD COLUMN hid uuid PRIMARY KEY DEFAULT gen_random_uuid()" postgres
conn="sslmode=disable dbname=postgres application_name=pgb"
(pgbench -h 127.0.0.1 -p "$PP" -U postgres -n -M prepared -c 1 -T 8 -f "$HERE/tpcb-plus-select.sql" "$conn" > "$D.one.log" 2>&1) &
sleep 1.5
pid=$(psql -h 127.0.0.1 -p "$PG" -U postgres -Atc "select pid from pg_stat_activity where application_name = 'pgb' limit 1" postgres)
a=$(awk '{print $14+$15}' /proc/"$pid"/stat); sleep 5; b=$(awk '{print $14+$15}' /proc/"$pid"/stat)
wait
tps=$(grep -o "^tps = [0-9.]*" "$D.one.log" | awk '{print $3}')
python3 -c "print('$L 1 client: tps %s, backend %.3f ms CPU per transaction' % ($tps, ($b-$a)*10/5/$tps))"
echo -n "$L 16 clients: "
pgbench -h 127.0.0.1 -p "$PP" -U postgres -n -M prepared -c 16 -j 2 -T 15 --max-tries 1000 "sslmode=disable dbname=postgres" 2>&1 | grep "^tps"
"$B" down --data-dir "$D" >/dev/null 2>&1
rm -rf "$D" "$D.one.log"
