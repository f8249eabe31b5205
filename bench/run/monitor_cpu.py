#!/usr/bin/env python3
"""The monitor's own CPU per checkpoint (issue 18: the engine's work after the resume).

`stall MIB 100 SECONDS` (bench/run/stall.c: rewrites all of its MIB MiB on every pass) under
`kioku run --medium shm --interval INTERVAL`, for each kioku given, interleaved run by run. The
monitor's CPU (user + system of the `kioku run` process alone, not the program's) is read from
/proc/PID/stat until it exits and divided by the checkpoints and by the MiB they copied: a
figure the machine's load changes far less than wall or stop times.

Usage: BENCH_BIN=<dir holding stall> KIOKUS="base=/path/kioku this=/path/kioku"
       [SIZES="48 160"] [REPS=2] [INTERVAL=500ms] [SECONDS=8] python3 bench/run/monitor_cpu.py
Prints a Markdown table.
"""
import shutil
import os
import statistics
import subprocess
import sys
import tempfile

from runlib import read_summary, remove_present, watch_cpu

BIN = os.environ["BENCH_BIN"]
KIOKUS = [kv.split("=", 1) for kv in os.environ["KIOKUS"].split()]
SIZES = [int(x) for x in os.environ.get("SIZES", "48 160").split()]
REPS = int(os.environ.get("REPS", "2"))
INTERVAL = os.environ.get("INTERVAL", "500ms")
SECONDS = os.environ.get("SECONDS", "8")
def one(kioku, mib, shm):
    pool = os.path.join(shm, "m.pool")
    summary = os.path.join(shm, "m.json")
    remove_present(pool, summary)
    p = subprocess.Popen([kioku, "run", "--pool", pool, "--medium", "shm", "--interval", INTERVAL,
                          "--summary-json", summary, "--", os.path.join(BIN, "stall"), str(mib), "100",
                          SECONDS], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu = watch_cpu(p)
    s = read_summary(summary)
    os.remove(pool)
    return cpu, s


def main():
    shm = tempfile.mkdtemp(dir="/dev/shm")
    rows = {(n, m): [] for n, _ in KIOKUS for m in SIZES}
    for r in range(REPS):
        for m in SIZES:
            for name, k in KIOKUS:
                cpu, s = one(k, m, shm)
                n = max(s["checkpoints"], 1)
                mib = s["copied_bytes"] / 2**20
                rows[(name, m)].append((cpu, n, mib, statistics.median(s["stop_ms"] or [0])))
                print(f"rep {r + 1} {name} {m} MiB: monitor {cpu:.2f} s CPU, {n} checkpoints, "
                      f"{mib:.0f} MiB copied", file=sys.stderr, flush=True)
    shutil.rmtree(shm)
    print("| program | kioku | checkpoints | MiB copied / checkpoint | monitor CPU s | monitor ms / checkpoint | monitor ms / MiB copied | stop median ms |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, m), rs in rows.items():
        cpu = statistics.median(x[0] for x in rs)
        n = statistics.median(x[1] for x in rs)
        mib = statistics.median(x[2] for x in rs)
        per_ck = statistics.median(x[0] / x[1] * 1000 for x in rs)
        per_mib = statistics.median(x[0] / max(x[2], 1) * 1000 for x in rs)
        stop = statistics.median(x[3] for x in rs)
        print(f"| stall {m} 100 | {name} | {n:.0f} | {mib / max(n, 1):.0f} | {cpu:.2f} | {per_ck:.1f} | {per_mib:.2f} | {stop:.0f} |")


main()
