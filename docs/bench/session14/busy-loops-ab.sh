#!/bin/bash
# Issue 3's one-client cell, alternating runs on a quiet machine with runs
# beside two nice-19 busy loops (which keep both vCPUs from idling).
# usage: busy-loops-ab.sh OUTDIR PAIRS [FSYNC_DELAY]   (from the repository root, after make build)
set -u
out=$1 pairs=$2 delay=${3:-8ms}
mkdir -p "$out"
export TASHKENT_PG_INCLUDEDIR=$(bash scripts/pg-server-headers.sh)
for i in $(seq 1 "$pairs"); do
  for mode in idle busy; do
    pids=()
    if [ "$mode" = busy ]; then
      for _ in 1 2; do nice -n 19 bash -c 'while :; do :; done' & pids+=($!); done
    fi
    bin/tashkent bench pgbench --systems sync-on,mw --scale 16 --clients 1 --fsync-delay "$delay" \
      --duration 5s --repeat 3 --per-statement > "$out/$mode-$i.txt" 2>&1
    for p in "${pids[@]}"; do kill "$p"; done
    echo "$mode $i: $(grep -E '^tashkent mw ' "$out/$mode-$i.txt")"
  done
done
