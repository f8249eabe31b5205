#!/usr/bin/env python3
"""Summarises bench/persist/mp_threads_ab.sh's output (stdin or a file): per agent, shape and
thread count, the medians over the rounds of objects made persistent per second of wall time,
per second of the storing threads' CPU time and of the process's, and the storing threads' time
blocked or waiting per second of wall time (two threads in turn: about 0.5 or more; at once: 0); the scaling from 1 to 2 threads (2-thread
throughput / 1-thread throughput, per round, then the median) and B / A. Prints a Markdown
table."""
import re
import statistics
import sys
from collections import defaultdict

text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
rows = defaultdict(list)  # (agent, shape, threads) -> [(round, wall/s, cpu/s, process cpu s, objects)]
loads = []
for m in re.finditer(r"agent=(\w) round=(\d+) load=([\d.]+) RESULT threads=(\d) shape=(\w+) objects=(\d+) "
                     r"wall_s=([\d.]+) cpu_s=([\d.]+) process_cpu_s=([\d.]+) waited_s=([\d.]+) objs_per_wall_s=(\d+) "
                     r"objs_per_cpu_s=(\d+)", text):
    agent, rnd, load, t, shape, objs, wall, cpu, pcpu, waited, pw, pc = m.groups()
    loads.append(float(load))
    rows[(agent, shape, int(t))].append(
        (int(rnd), float(pw), float(pc), float(objs) / float(pcpu), float(waited) / float(wall)))


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs):
    return f"{min(xs) / 1e3:.0f}-{max(xs) / 1e3:.0f}" if xs else "-"


print("| shape | agent | threads | k objects/s, wall (median; min-max) | k objects/s per CPU s of the storing threads | k objects/s per process CPU s | storing threads blocked or waiting, ÷ wall | 1 → 2 threads, wall (median of rounds) |")
print("|---|---|---|---|---|---|---|---|")
for shape in ("disjoint", "shared"):
    for agent in ("A", "B"):
        for t in (1, 2):
            r = rows[(agent, shape, t)]
            w = [x[1] for x in r]
            c = [x[2] for x in r]
            p = [x[3] for x in r]
            wt = [x[4] for x in r]
            scale = ""
            if t == 2:
                one = {x[0]: x[1] for x in rows[(agent, shape, 1)]}
                ratios = [x[1] / one[x[0]] for x in r if x[0] in one]
                scale = f"{med(ratios):.2f}× ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else ""
            print(f"| {shape} | {agent} | {t} | {med(w) / 1e3:.0f} ({spread(w)}) | {med(c) / 1e3:.0f} | {med(p) / 1e3:.0f} | {med(wt):.2f} | {scale} |")
for shape in ("disjoint", "shared"):
    for t in (1, 2):
        a = {x[0]: x[1] for x in rows[("A", shape, t)]}
        b = {x[0]: x[1] for x in rows[("B", shape, t)]}
        rs = [b[k] / a[k] for k in a if k in b]
        if rs:
            print(f"\nB / A, {shape}, {t} thread(s), wall throughput: {med(rs):.2f}× ({min(rs):.2f}-{max(rs):.2f})", end="")
print()
if loads:
    print(f"\nload average (1 min) at the forks' ends: {min(loads):.1f}-{max(loads):.1f}, median {med(loads):.1f}")
