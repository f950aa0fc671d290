#!/usr/bin/python3
"""bench/soak_report.py: the Markdown report of a soak run (called by soak.sh)."""
import glob
import os
import sys

work, start, sample, hold_from, hold_for, minutes, send_rate, recv_rate = sys.argv[1:9]
start, sample, hold_from, hold_for = int(start), int(sample), int(hold_from), int(hold_for)


def latencies(prefix):
    """Per interval: the latencies (ms) of the transactions that ended in it."""
    buckets = {}
    for path in glob.glob(os.path.join(work, prefix + '.[0-9]*')):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 6 or parts[2] == 'skipped':
                    continue
                ended = int(parts[4]) + int(parts[5]) / 1e6 - start
                buckets.setdefault(int(ended // sample), []).append(int(parts[2]) / 1000.0)
    return buckets


def pct(values, p):
    if not values:
        return float('nan')
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


send = latencies('send')
recv = latencies('recv')
samples = []
with open(os.path.join(work, 'samples.txt')) as f:
    for line in f:
        parts = line.split()
        if len(parts) == 9:
            samples.append([int(x) for x in parts])

print(f"Soak: {minutes} min, sends {send_rate}/s (2 clients), receive-and-settle {recv_rate}/s "
      f"(4 clients; 85 % complete, 10 % abandon, 5 % left to expire; lock 5 s, "
      f"max_delivery_count 5); a REPEATABLE READ transaction held open from "
      f"{hold_from // 60} to {(hold_from + hold_for) // 60} min.\n")
print("| t (min) | held xmin | heap MB | index MB | live | dead | HOT % | queued | dead letters "
      "| send p50 / p99 ms | receive+settle p50 / p99 ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
prev = None
for s in samples:
    t, heap, idx, live, dead, upd, hot, queued, dlq = s
    b = t // sample - 1
    hot_pct = 100.0 * hot / upd if upd else 0.0
    held = 'yes' if hold_from <= t < hold_from + hold_for else ''
    sp = send.get(b, [])
    rp = recv.get(b, [])
    print(f"| {t / 60:.1f} | {held} | {heap / 1048576:.1f} | {idx / 1048576:.1f} | {live} | {dead} "
          f"| {hot_pct:.0f} | {queued} | {dlq} | {pct(sp, 0.5):.1f} / {pct(sp, 0.99):.1f} "
          f"| {pct(rp, 0.5):.1f} / {pct(rp, 0.99):.1f} |")
for name in ('send.out', 'recv.out'):
    with open(os.path.join(work, name)) as f:
        for line in f:
            if line.startswith(('number of transactions actually processed', 'latency average',
                                'tps', 'number of failed')):
                print(f"\n{name}: {line.strip()}", end='')
print()
