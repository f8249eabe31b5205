#!/usr/bin/env python3
"""xz -T2 -6 on 50 MiB of text under kioku (issue 18: ≤ 5 % CPU at 1 s): the CPU of all
processes and the monitor's own, per kioku, interleaved run by run with a plain run.

Each run: `kioku run --medium shm --interval INTERVAL` (pool on /dev/shm); the CPU of all
processes is the children's rusage (the program, the monitor, its init), the monitor's own is
its user + system time from /proc/PID/stat sampled until it exits. Prints a Markdown table
(one row per kioku and interval; medians of REPS) and a line per run on stderr.

Usage: KIOKUS="base=/path/kioku this=/path/kioku" [INTERVALS="1s 100ms"] [REPS=1]
       python3 bench/run/xz_cpu.py
"""
import os
import resource
import statistics
import subprocess
import tempfile
import time

from runlib import log, read_summary, remove_present, watch_cpu, write_xz_text

KIOKUS = [kv.split("=", 1) for kv in os.environ["KIOKUS"].split()]
INTERVALS = os.environ.get("INTERVALS", "1s 100ms").split()
REPS = int(os.environ.get("REPS", "1"))
def one(cmd, summary=None):
    """(wall s, CPU s of everything, monitor CPU s, summary) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    mon = watch_cpu(p)
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: exit {p.returncode}")
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, mon, read_summary(summary) if summary else {}


def pct(a, b):
    return f"{(a / b - 1) * 100:+.1f} %"


def main():
    shm = tempfile.mkdtemp(dir="/dev/shm")
    inp = os.path.join(shm, "xz.in")
    write_xz_text(inp)
    xz = ["xz", "-T2", "-6", "-c", "-k", inp]
    pool, summary = os.path.join(shm, "x.pool"), os.path.join(shm, "x.json")
    plain, runs = [], {(n, i): [] for n, _ in KIOKUS for i in INTERVALS}
    for r in range(REPS):
        plain.append(one(xz))
        log(f"rep {r + 1} plain: {plain[-1][0]:.1f} s, {plain[-1][1]:.1f} s CPU")
        for i in INTERVALS:
            for name, k in KIOKUS:
                remove_present(pool, summary)
                runs[(name, i)].append(one([k, "run", "--pool", pool, "--medium", "shm", "--interval", i,
                                            "--summary-json", summary, "--"] + xz, summary))
                w, c, m, s = runs[(name, i)][-1]
                log(f"rep {r + 1} {name} {i}: {w:.1f} s, {c:.1f} s CPU, monitor {m:.2f} s, "
                    f"{s.get('checkpoints')} checkpoints, {s.get('copied_bytes', 0) / 2**20:.0f} MiB copied")
    remove_present(pool, summary, inp)
    os.rmdir(shm)
    pw = statistics.median(x[0] for x in plain)
    pc = statistics.median(x[1] for x in plain)
    print(f"Plain: {pw:.1f} s wall, {pc:.1f} s CPU (medians of {REPS}).\n")
    print("| kioku | interval | checkpoints | MiB copied / checkpoint | stop median ms | wall | wall overhead | "
          "CPU (all) | CPU overhead | monitor CPU | monitor ms / MiB copied |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, i), rs in runs.items():
        w = statistics.median(x[0] for x in rs)
        c = statistics.median(x[1] for x in rs)
        m = statistics.median(x[2] for x in rs)
        s = sorted(rs, key=lambda x: x[1])[len(rs) // 2][3]
        n = max(s.get("checkpoints") or 1, 1)
        mib = s.get("copied_bytes", 0) / 2**20
        st = sorted(s.get("stop_ms") or [0])
        print(f"| {name} | {i} | {n} | {mib / n:.0f} | {st[len(st) // 2]:.0f} | {w:.1f} s | {pct(w, pw)} | "
              f"{c:.1f} s | {pct(c, pc)} | {m:.1f} s | {m / max(mib, 1) * 1000:.2f} |")


main()
