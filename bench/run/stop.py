#!/usr/bin/env python3
"""Stop floor and monitor CPU (issue 18), called by bench/run/stop.sh.

* pi spigot at --interval 10ms: kioku's reported stop (median, 90th percentile), the run's
  wall and CPU (all processes, the monitor included) against a plain run's.
* xz -T2 -6 on 50 MiB of text at 1 s and 100 ms: wall and CPU against a plain run's.
Each kioku (BASE_KIOKU, this tree's) is run interleaved with the plain run, repetition by
repetition; medians are shown. Prints Markdown.
"""
import os
import statistics

from runlib import log, read_summary, remove_present, timed_cpu as timed, write_xz_text

BIN = os.environ["BENCH_BIN"]
SHM = os.environ["BENCH_SHM"]
KIOKUS = [("this", os.environ["KIOKU"])]
if os.environ.get("BASE_KIOKU"):
    KIOKUS.insert(0, ("base", os.environ["BASE_KIOKU"]))
DIGITS = os.environ.get("PI_DIGITS", "20000")
PI_REPS = int(os.environ.get("PI_REPS", "3"))
XZ_REPS = int(os.environ.get("XZ_REPS", "1"))
RT = ["chrt", "-f", "5"] if os.environ.get("RT") == "1" else []


def under_kioku(kioku, interval, prog):
    pool = os.path.join(SHM, "stop.pool")
    summary = os.path.join(SHM, "summary.json")
    remove_present(pool, summary)
    wall, cpu = timed(RT + [kioku, "run", "--pool", pool, "--medium", "shm", "--interval", interval,
                            "--summary-json", summary, "--"] + prog)
    s = read_summary(summary)
    os.remove(pool)
    return wall, cpu, s


def stops(s, fault_us):
    """(stops alone, stops with the write-protect faults taken after each resume) in ms. A
    kioku that reports `stop_capture_ms` counts the faults in `stop_ms` at the per-fault cost
    it measured; for one that does not, the faults are priced at `fault_us` (the cost the other
    kioku measured in the same run)."""
    if "stop_capture_ms" in s:
        return s["stop_capture_ms"], s["stop_ms"]
    alone = s["stop_ms"]
    faults = s.get("wp_faults") or [0] * len(alone)
    honest = [x + (faults[i + 1] if i + 1 < len(faults) else 0) * fault_us / 1e3 for i, x in enumerate(alone)]
    return alone, honest


def pct(a, b):
    return f"{(a / b - 1) * 100:+.1f} %"


def pi_rows():
    prog = [os.path.join(BIN, "pi"), DIGITS]
    plain, runs = [], {name: [] for name, _ in KIOKUS}
    for r in range(PI_REPS):
        plain.append(timed(RT + prog))
        for name, k in KIOKUS:
            runs[name].append(under_kioku(k, "10ms", prog))
        log(f"pi rep {r + 1}: plain {plain[-1][0]:.2f} s; " +
            "; ".join(f"{n} {runs[n][-1][0]:.2f} s, stop median {statistics.median(stops(runs[n][-1][2], 0)[0]):.3f} ms"
                      for n in runs))
    pw = statistics.median(w for w, _ in plain)
    pc = statistics.median(c for _, c in plain)
    fault_us = max((x[2].get("wp_fault_us", 0) for rs in runs.values() for x in rs), default=0)
    out = [f"pi spigot, {DIGITS} digits, `--interval 10ms`, pool on /dev/shm{', SCHED_FIFO (RT=1)' if RT else ''}; "
           f"medians of {PI_REPS} (stop: median and 90th percentile of every checkpoint of the median run; "
           f"\"+ faults\": with the write-protect faults the program took after each resume, at "
           f"{fault_us:.2f} µs each as measured by the monitor). "
           f"Plain: {pw:.2f} s wall, {pc:.2f} s CPU.", "",
           "| kioku | checkpoints | copied KiB / checkpoint | faults / checkpoint | stop median ms | stop p90 ms | + faults median ms | + faults p90 ms | wall | wall overhead | CPU | CPU overhead |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, rs in runs.items():
        rs = sorted(rs, key=lambda x: statistics.median(stops(x[2], fault_us)[1]))
        w, c, s = rs[len(rs) // 2]
        alone, honest = (sorted(v) for v in stops(s, fault_us))
        wall = statistics.median(x[0] for x in rs)
        cpu = statistics.median(x[1] for x in rs)
        n = max(s["checkpoints"], 1)
        faults = sum(s.get("wp_faults") or [0]) / n
        out.append(f"| {name} | {s['checkpoints']} | {s['copied_bytes'] / n / 1024:.0f} | {faults:.1f} | "
                   f"{statistics.median(alone):.3f} | {alone[int(len(alone) * 0.9)]:.3f} | "
                   f"{statistics.median(honest):.3f} | {honest[int(len(honest) * 0.9)]:.3f} | {wall:.2f} s | {pct(wall, pw)} | "
                   f"{cpu:.2f} s | {pct(cpu, pc)} |")
    return out


def xz_rows():
    inp = os.path.join(SHM, "xz.in")
    write_xz_text(inp)
    xz = ["xz", "-T2", "-6", "-c", "-k", inp]
    plain, runs = [], {(name, i): [] for name, _ in KIOKUS for i in ("1s", "100ms")}
    for r in range(XZ_REPS):
        plain.append(timed(xz))
        for name, k in KIOKUS:
            for i in ("1s", "100ms"):
                runs[(name, i)].append(under_kioku(k, i, xz))
        log(f"xz rep {r + 1}: plain {plain[-1][0]:.1f} s / {plain[-1][1]:.1f} s CPU; " +
            "; ".join(f"{n} {i} {v[-1][0]:.1f} s / {v[-1][1]:.1f} s CPU" for (n, i), v in runs.items()))
    os.remove(inp)
    pw = statistics.median(w for w, _ in plain)
    pc = statistics.median(c for _, c in plain)
    out = [f"xz -T2 -6 on 50 MiB of text, pool on /dev/shm, normal priority; medians of {XZ_REPS}. "
           f"Plain: {pw:.1f} s wall, {pc:.1f} s CPU.", "",
           "| kioku | interval | checkpoints | stop median ms | wall | wall overhead | CPU | CPU overhead |",
           "|---|---|---|---|---|---|---|---|"]
    for (name, i), rs in runs.items():
        wall = statistics.median(x[0] for x in rs)
        cpu = statistics.median(x[1] for x in rs)
        s = rs[0][2]
        st = s.get("stop_ms") or [0]
        out.append(f"| {name} | {i} | {s['checkpoints']} | {statistics.median(st):.1f} | {wall:.1f} s | {pct(wall, pw)} | "
                   f"{cpu:.1f} s | {pct(cpu, pc)} |")
    return out


lines = pi_rows() if PI_REPS > 0 else []
if XZ_REPS > 0:
    lines += ([""] if lines else []) + xz_rows()
print("\n".join(lines))
