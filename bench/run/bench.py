#!/usr/bin/env python3
"""Transparent process checkpoint benchmark (`kioku run` / `kioku restore`), all in one run:

* overhead: the pi spigot (15,000 and 30,000 digits) and `xz -9` on generated text, run
  plainly and under `kioku run` at several intervals (pool on /dev/shm, medium shm); medians;
* checkpoint stop time vs dirty MiB: a 512 MiB program writing a given share of its pages
  between checkpoints, stop times as the monitor measures them (stop request to resume);
* the same 512 MiB process dumped by a naive checkpoint (SIGSTOP, process_vm_readv of every
  writable mapping, write, fsync), on /dev/shm and on disk, and the disk's sequential write
  bandwidth measured here;
* restore time vs resident MiB: `kioku restore` of a checkpoint of a program holding N MiB.

Prints the markdown section for docs/perf.md. Environment: see bench/run/run.sh.
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KIOKU = os.path.join(ROOT, "target/release/kioku")
BIN = os.environ["BENCH_BIN"]
SHM = os.environ["BENCH_SHM"]
DISK = os.environ["BENCH_DISK"]
PI_REPS = int(os.environ.get("PI_REPS", "3"))
XZ_REPS = int(os.environ.get("XZ_REPS", "3"))
XZ_MIB = int(os.environ.get("XZ_MIB", "24"))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def timed(cmd, **kw):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, **kw)
    if p.returncode != 0:
        raise SystemExit(f"{cmd} failed: {p.returncode}")
    return time.monotonic() - t0


def kioku_run(args, interval, pool):
    if os.path.exists(pool):
        os.remove(pool)
    summary = pool + ".json"
    t = timed([KIOKU, "run", "--pool", pool, "--interval", interval, "--summary-json", summary, "--"] + args)
    s = json.load(open(summary))["summary"]
    return t, s


def overhead(name, args, intervals, reps, where=None):
    where = where or SHM
    rows = []
    plain = []
    runs = {i: [] for i in intervals}
    stops = {i: [] for i in intervals}
    ckpts = {i: [] for i in intervals}
    cap = {i: [] for i in intervals}
    for r in range(reps):
        plain.append(timed(args))
        for i in intervals:
            t, s = kioku_run(args, i, os.path.join(where, "o.pool"))
            runs[i].append(t)
            stops[i].extend(s["stop_ms"])
            ckpts[i].append(s["checkpoints"])
            cap[i].append(s["captured_bytes"])
        log(f"{name} rep {r + 1}/{reps}: plain {plain[-1]:.2f} s, " + ", ".join(f"{i} {runs[i][-1]:.2f} s" for i in intervals))
    p = statistics.median(plain)
    for i in intervals:
        k = statistics.median(runs[i])
        st = sorted(stops[i]) or [0.0]
        rows.append(
            f"| {name} | {i} | {p:.3f} | {k:.3f} | {100 * (k / p - 1):+.1f} % | "
            f"{statistics.median(ckpts[i]):.0f} | {statistics.median(st):.2f} | {st[-1]:.2f} | "
            f"{statistics.median(cap[i]) / (1 << 20):.0f} |"
        )
    return rows


def program_of(monitor_pid):
    for _ in range(2000):
        try:
            kids = open(f"/proc/{monitor_pid}/task/{monitor_pid}/children").read().split()
            if kids:
                return int(kids[0])
        except OSError:
            pass
        time.sleep(0.005)
    raise SystemExit("program did not start")


def stop_time(mib, pct, secs, interval="100ms"):
    pool = os.path.join(SHM, "s.pool")
    _, s = kioku_run([f"{BIN}/dirty", str(mib), str(pct), str(secs)], interval, pool)
    # The first checkpoints copy everything (the program is still filling its memory).
    st = s["stop_ms"][3:] or s["stop_ms"]
    return statistics.median(st), max(st), s


def naive(mib, where):
    p = subprocess.Popen([f"{BIN}/dirty", str(mib), "1", "30"], stdout=subprocess.DEVNULL)
    time.sleep(1.5 + mib / 1024)
    out = subprocess.run([f"{BIN}/naive_dump", str(p.pid), os.path.join(where, "dump")], capture_output=True, text=True).stdout
    p.kill()
    p.wait()
    os.remove(os.path.join(where, "dump"))
    return float(re.search(r"seconds=([0-9.]+)", out).group(1))


def disk_bandwidth():
    path = os.path.join(DISK, "bw")
    data = os.urandom(1 << 20)
    t0 = time.monotonic()
    with open(path, "wb") as f:
        for _ in range(512):
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    t = time.monotonic() - t0
    os.remove(path)
    return 512 / t


def restore_time(mib):
    pool = os.path.join(SHM, "r.pool")
    if os.path.exists(pool):
        os.remove(pool)
    m = subprocess.Popen([KIOKU, "run", "--pool", pool, "--interval", "0", "--", f"{BIN}/dirty", str(mib), "0", "60"], stdout=subprocess.DEVNULL)
    prog = program_of(m.pid)
    time.sleep(1.0 + mib / 512)
    subprocess.run([KIOKU, "checkpoint", "--pool", pool], check=True, stdout=subprocess.DEVNULL)
    os.kill(prog, signal.SIGKILL)
    m.wait()
    r = subprocess.Popen([KIOKU, "restore", "--pool", pool, "--interval", "0", "--summary"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = r.stderr.readline()
    prog = program_of(r.pid)
    os.kill(prog, signal.SIGKILL)
    r.wait()
    ms = float(re.search(r"in ([0-9.]+) ms", line).group(1))
    written = float(re.search(r"\(([0-9.]+) MiB written back\)", line).group(1))
    return ms, written


def main():
    out = []
    out.append("### Overhead against the same program run plainly (pool on /dev/shm, medium shm)\n")
    out.append("| program | interval | plain s | under kioku s | overhead | checkpoints | median stop ms | max stop ms | captured MiB |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    out += overhead("pi 15,000 digits", [f"{BIN}/pi", "15000"], ["10ms", "100ms", "1s"], PI_REPS)
    out += overhead("pi 30,000 digits", [f"{BIN}/pi", "30000"], ["10ms", "100ms", "1s"], PI_REPS)
    out += overhead("pi 15,000 digits, pool on disk (medium file)", [f"{BIN}/pi", "15000"], ["10ms", "100ms"], PI_REPS, DISK)
    xz_in = os.path.join(SHM, "xz.in")
    with open(xz_in, "w") as f:
        import random

        rnd = random.Random(1)
        words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9))) for _ in range(5000)]
        n = 0
        while n < XZ_MIB << 20:
            line = " ".join(rnd.choice(words) for _ in range(12)) + "\n"
            f.write(line)
            n += len(line)
    out += overhead(f"xz -9 -T1, {XZ_MIB} MiB of text", ["xz", "-9", "-T1", "-c", "-k", xz_in], ["1s", "10s"], XZ_REPS)
    os.remove(xz_in)

    out.append("\n### Checkpoint stop time vs dirty MiB (a 512 MiB program, 8 s at 200 ms; median / max after the first three)\n")
    out.append("| dirty share | dirty MiB | median stop ms | max stop ms |")
    out.append("|---|---|---|---|")
    for pct in [1, 10, 50, 100]:
        med, mx, _ = stop_time(512, pct, 8, "200ms")
        out.append(f"| {pct} % | {512 * pct / 100:.0f} | {med:.1f} | {mx:.1f} |")
        log(f"stop time {pct} %: {med:.1f} ms")
    nshm = naive(512, SHM)
    ndisk = naive(512, DISK)
    bw = disk_bandwidth()
    out.append(f"\nNaive checkpoint of the same 512 MiB process (stop, process_vm_readv every writable mapping, write, fsync, resume): "
               f"**{nshm:.3f} s** to /dev/shm, **{ndisk:.3f} s** to disk; the disk's sequential write bandwidth here: **{bw:.0f} MiB/s** "
               f"(512 MiB written and fsynced).")

    out.append("\n### Restore time vs resident MiB (`kioku restore`, pool on /dev/shm)\n")
    out.append("| resident MiB | restore ms | MiB written back |")
    out.append("|---|---|---|")
    for mib in [64, 256, 512]:
        ms, w = restore_time(mib)
        out.append(f"| {mib} | {ms:.0f} | {w:.0f} |")
        log(f"restore {mib} MiB: {ms:.0f} ms")
    print("\n".join(out))


if __name__ == "__main__":
    main()
