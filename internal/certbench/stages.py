#!/usr/bin/env python3
# Joins the stage logs of a paced certifier-bench run (docs/BENCHMARKS.md,
# "Where a paced request's time goes"): the certifier's
# (TASHKENT_CERTIFIER_STAGES) and the load generator's
# (TASHKENT_CERTIFIER_STAGES_BENCH). Usage: stages.py SERVER_FILE CLIENT_FILE
import sys, bisect
srv, cli = sys.argv[1], sys.argv[2]
replies = {}
batches = []
for line in open(srv):
    f = line.split()
    if f[0] == 'r':
        replies[(f[1], int(f[2]))] = (int(f[3]),) + tuple(map(int, f[4:8]))
    else:
        batches.append(tuple(map(int, f[1:6])))
batches.sort()
firsts = [b[0] for b in batches]
names = ['pace lag (called-scheduled)', 'client->server recv', 'recv->decided', 'decided->batch write start',
         'wal write', 'fsync', 'durable->send start', 'send', 'server sent->client returned', 'TOTAL (returned-scheduled)', 'server recv->sent']
cols = [[] for _ in names]
rows = []
n = miss = 0
for line in open(cli):
    f = line.split()
    key = (f[1], int(f[2]))
    sch, called, ret = map(int, f[3:6])
    r = replies.get(key)
    if not r:
        miss += 1; continue
    ver, recv, dec, ss, sent = r
    i = bisect.bisect_right(firsts, ver) - 1
    if i < 0 or not (batches[i][0] <= ver <= batches[i][1]):
        miss += 1; continue
    _, _, ws, wr, du = batches[i]
    vals = [called-sch, recv-called, dec-recv, ws-dec, wr-ws, du-wr, ss-du, sent-ss, ret-sent, ret-sch, sent-recv]
    for c, v in zip(cols, vals): c.append(v)
    rows.append(vals)
    n += 1
print(f"joined {n}, missing {miss}")
def pct(a, p): return a[min(len(a)-1, int(len(a)*p))]/1e3
print(f"{'stage (us)':36s} {'mean':>8s} {'p50':>8s} {'p90':>8s} {'p99':>8s} {'p99.9':>8s} {'max':>8s}")
for name, c in zip(names, cols):
    c.sort()
    print(f"{name:36s} {sum(c)/len(c)/1e3:8.0f} {pct(c,.5):8.0f} {pct(c,.9):8.0f} {pct(c,.99):8.0f} {pct(c,.999):8.0f} {c[-1]/1e3:8.0f}")


rows.sort(key=lambda v: v[9])
tail = rows[int(len(rows)*0.99):]
print(f"slowest 1% ({len(tail)} requests, total >= {tail[0][9]/1e3:.0f} us): mean per stage (us)")
for j, name in enumerate(names):
    print(f"  {name:36s} {sum(v[j] for v in tail)/len(tail)/1e3:8.0f}")
