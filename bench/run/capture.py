#!/usr/bin/env python3
"""Capture side of process checkpoints (`kioku run`), against CRIU and DMTCP in the same run:

* stop vs dirty MiB: a 512 MiB program (bench/run/stall.c) rewriting 1-100 % of its pages
  between checkpoints, on /dev/shm and on disk. Two stop figures: what kioku reports (stop
  request to resume) and what the program lost, timed from inside (its slowest passes less a
  plain run's median pass: the stop plus the write-protect faults it takes after resuming).
  "before" is this tree with KIOKU_NO_ADAPTIVE=1 KIOKU_NO_STAGING=1 (every area write-tracked,
  copies straight into the pool's shared file mapping), as main does it;
* CRIU 4.2 (`criu dump --leave-running`, a full dump each time) and DMTCP (`dmtcp_command
  --checkpoint`) on the same program, when found (env CRIU=path, DMTCP_LAUNCH=path; skipped,
  saying so, when missing);
* the first checkpoint: `kioku checkpoint` of the 512 MiB program, until it returns and until
  it was durable; `sort -S 200M` of 100 MiB at --interval 100ms: time from start until the
  pool first holds a restorable checkpoint;
* xz -T2 -6 on 50 MiB of text at 1 s and 100 ms: wall and CPU (all processes, the monitor
  included) against plain runs.

Prints the markdown for docs/perf.md and writes a plot (stop vs dirty MiB). Env: see
bench/run/capture.sh.
"""
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from runlib import log, remove_present, timed_cpu, write_xz_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KIOKU = os.path.join(ROOT, "target/release/kioku")
BIN = os.environ["BENCH_BIN"]
SHM = os.environ["BENCH_SHM"]
DISK = os.environ["BENCH_DISK"]
PLOT = os.environ.get("BENCH_PLOT")
MIB = int(os.environ.get("STALL_MIB", "512"))
SECS = float(os.environ.get("STALL_SECS", "6"))
INTERVAL = float(os.environ.get("STALL_INTERVAL", "0.5"))
PCTS = [int(p) for p in os.environ.get("STALL_PCTS", "1,10,50,100").split(",")]
REPS = int(os.environ.get("XZ_REPS", "3"))
SORT_REPS = int(os.environ.get("SORT_REPS", "3"))
CRIU = os.environ.get("CRIU") or None
DMTCP_LAUNCH = os.environ.get("DMTCP_LAUNCH") or None
BEFORE = {"KIOKU_NO_ADAPTIVE": "1", "KIOKU_NO_STAGING": "1"}


def parse_stall(out):
    m = re.search(r"passes=(\d+) median_us=([0-9.]+) longest_us=([0-9.,]*)", out)
    if not m:
        raise SystemExit(f"stall printed: {out!r}")
    longest = [float(x) for x in m.group(3).split(",") if x]
    return float(m.group(2)), longest


def lost_ms(longest, k, base_us):
    """Median of the k slowest passes less the plain median pass: what one checkpoint cost."""
    if not longest:
        return float("nan")
    k = max(1, min(k, len(longest)))
    return max(0.0, statistics.median(longest[:k]) - base_us) / 1e3


def plain_stall(pct):
    """A plain run's median pass, and its own slowest passes (the machine's noise)."""
    out = subprocess.run([f"{BIN}/stall", str(MIB), str(pct), str(SECS)], capture_output=True, text=True, check=True).stdout
    return parse_stall(out)


def kioku_stall(pct, where, env_extra):
    pool = os.path.join(where, "s.pool")
    if os.path.exists(pool):
        os.remove(pool)
    summ = pool + ".json"
    env = dict(os.environ, **env_extra)
    medium = [] if where == SHM else ["--medium", "file"]
    out = subprocess.run([KIOKU, "run", "--pool", pool, *medium, "--interval", f"{int(INTERVAL * 1000)}ms", "--summary-json", summ, "--",
                          f"{BIN}/stall", str(MIB), str(pct), str(SECS)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"kioku run failed: {out.stderr}")
    s = json.load(open(summ))["summary"]
    os.remove(pool)
    _, longest = parse_stall(out.stdout)
    reported = s["stop_ms"][3:] or s["stop_ms"] or [float("nan")]
    return statistics.median(reported), longest, s


def criu_stall(pct, where):
    """The program run plainly, dumped by CRIU (--leave-running, full dump) every INTERVAL."""
    p = subprocess.Popen([f"{BIN}/stall", str(MIB), str(pct), str(SECS)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(0.3 + MIB / 1024)
    dumps = []
    d = tempfile.mkdtemp(dir=where)
    while p.poll() is None:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        t0 = time.monotonic()
        r = subprocess.run([CRIU, "dump", "-t", str(p.pid), "-D", d, "--leave-running", "--shell-job"], capture_output=True, text=True)
        if r.returncode == 0:
            dumps.append((time.monotonic() - t0) * 1e3)
        elif p.poll() is None:
            log(f"criu dump failed: {r.stderr[-300:]}")
        time.sleep(INTERVAL)
    out = p.stdout.read()
    shutil.rmtree(d, ignore_errors=True)
    _, longest = parse_stall(out)
    return (statistics.median(dumps) if dumps else float("nan")), longest, len(dumps)


def dmtcp_stall(pct, where):
    """The program under dmtcp_launch, checkpointed with dmtcp_command every INTERVAL."""
    bindir = os.path.dirname(DMTCP_LAUNCH)
    port = str(7779 + random.randint(0, 1000))
    d = tempfile.mkdtemp(dir=where)
    env = dict(os.environ, DMTCP_COORD_PORT=port, DMTCP_CHECKPOINT_DIR=d)
    p = subprocess.Popen([DMTCP_LAUNCH, "--new-coordinator", "--coord-port", port, "--ckptdir", d, "--no-gzip",
                          f"{BIN}/stall", str(MIB), str(pct), str(SECS)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    time.sleep(0.8 + MIB / 1024)
    dumps = []
    while p.poll() is None:
        t0 = time.monotonic()
        r = subprocess.run([os.path.join(bindir, "dmtcp_command"), "--coord-port", port, "--bcheckpoint"], capture_output=True, text=True, env=env)
        t = (time.monotonic() - t0) * 1e3
        images = [f for f in os.listdir(d) if f.endswith(".dmtcp")]
        # Counted only when an image was written.
        if r.returncode == 0 and images:
            dumps.append(t)
        for f in images:
            os.remove(os.path.join(d, f))
        time.sleep(INTERVAL)
    out = p.stdout.read()
    shutil.rmtree(d, ignore_errors=True)
    _, longest = parse_stall(out)
    return (statistics.median(dumps) if dumps else float("nan")), longest, len(dumps)


def stop_table():
    rows = ["| medium | dirty MiB | plain: noise | kioku reported | kioku lost | before reported | before lost | CRIU dump | CRIU lost | DMTCP ckpt | DMTCP lost |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    curves = {}
    for where, name in [(SHM, "/dev/shm"), (DISK, "ext4")]:
        for pct in PCTS:
            base, plain_longest = plain_stall(pct)
            # One slow pass per checkpoint taken while the program made its passes (the first
            # two copy it while it fills its memory).
            rep, longest, s = kioku_stall(pct, where, {})
            k = max(1, s["checkpoints"] - 2)
            now_lost = lost_ms(longest, k, base)
            noise = lost_ms(plain_longest, k, base)
            brep, blongest, bs = kioku_stall(pct, where, BEFORE)
            before_lost = lost_ms(blongest, max(1, bs["checkpoints"] - 2), base)
            cells = [f"{noise:.1f}", f"{rep:.1f}", f"{now_lost:.1f}", f"{brep:.1f}", f"{before_lost:.1f}"]
            dirty = MIB * pct / 100
            curves.setdefault(("kioku", name), []).append((dirty, now_lost))
            curves.setdefault(("kioku before", name), []).append((dirty, before_lost))
            for tool, fn in [("CRIU", criu_stall if CRIU else None), ("DMTCP", dmtcp_stall if DMTCP_LAUNCH else None)]:
                if fn is None:
                    cells += ["–", "–"]
                    continue
                t, lg, n = fn(pct, where)
                if n == 0:
                    log(f"{tool}: no checkpoint image was written; its column left empty")
                    cells += ["no image", "–"]
                    continue
                l = lost_ms(lg, n, base)
                cells += [f"{t:.0f}", f"{l:.1f}"]
                curves.setdefault((tool, name), []).append((dirty, l))
            rows.append(f"| {name} | {dirty:.0f} | " + " | ".join(cells) + " |")
            log(rows[-1])
    return rows, curves


def plot(curves):
    if not PLOT:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing (pip install matplotlib): no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, medium in zip(axes, ["/dev/shm", "ext4"]):
        for (tool, m), pts in sorted(curves.items()):
            if m != medium:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", label=tool)
        ax.set_title(f"pool / images on {medium}")
        ax.set_xlabel("MiB rewritten between checkpoints (of 512)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("time the program lost per checkpoint, ms")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def first_request(where):
    """`kioku checkpoint` of the 512 MiB program (its first): until it returns, until durable."""
    pool = os.path.join(where, "f.pool")
    if os.path.exists(pool):
        os.remove(pool)
    medium = [] if where == SHM else ["--medium", "file"]
    summ = pool + ".json"
    m = subprocess.Popen([KIOKU, "run", "--pool", pool, *medium, "--interval", "0", "--summary-json", summ, "--", f"{BIN}/stall", str(MIB), "1", "4"],
                         stdout=subprocess.DEVNULL)
    time.sleep(1.0 + MIB / 1024)
    t0 = time.monotonic()
    r = subprocess.run([KIOKU, "checkpoint", "--pool", pool], capture_output=True, text=True, check=True)
    ret = (time.monotonic() - t0) * 1e3
    a = json.loads(r.stdout)
    m.wait()
    s = json.load(open(summ))["summary"]
    os.remove(pool)
    stop = a["capture"]["stop"]
    durable = a["engine"]["total"]["secs"] * 1e3 + a["engine"]["total"]["nanos"] / 1e6
    sync = s["sync_ms"][0] if s.get("sync_ms") else float("nan")
    return ret, stop, durable, sync


def criu_full(where):
    p = subprocess.Popen([f"{BIN}/stall", str(MIB), "1", "4"], stdout=subprocess.DEVNULL, start_new_session=True)
    time.sleep(1.0 + MIB / 1024)
    d = tempfile.mkdtemp(dir=where)
    t0 = time.monotonic()
    r = subprocess.run([CRIU, "dump", "-t", str(p.pid), "-D", d, "--leave-running", "--shell-job"], capture_output=True, text=True)
    t = (time.monotonic() - t0) * 1e3
    p.kill()
    p.wait()
    shutil.rmtree(d, ignore_errors=True)
    return t if r.returncode == 0 else float("nan")


def sort_input():
    path = os.path.join(SHM, "sort.in")
    rnd = random.Random(7)
    with open(path, "w") as f:
        n = 0
        while n < 100 << 20:
            line = "%016x %s\n" % (rnd.getrandbits(64), "x" * rnd.randint(10, 60))
            f.write(line)
            n += len(line)
    return path


def first_durable_sort(inp):
    """Seconds from start until the pool holds a checkpoint, and the run's total."""
    pool = os.path.join(SHM, "sort.pool")
    if os.path.exists(pool):
        os.remove(pool)
    t0 = time.monotonic()
    m = subprocess.Popen([KIOKU, "run", "--pool", pool, "--interval", "100ms", "--", "sort", "-S", "200M", "-o", "/dev/null", inp],
                         stdout=subprocess.DEVNULL, env=dict(os.environ, LC_ALL="C"))
    first = None
    while m.poll() is None and first is None:
        i = subprocess.run([KIOKU, "inspect", "--pool", pool, "--json"], capture_output=True, text=True)
        try:
            if json.loads(i.stdout).get("epoch", 0) >= 1:
                first = time.monotonic() - t0
        except ValueError:
            pass
        time.sleep(0.05)
    m.wait()
    total = time.monotonic() - t0
    os.remove(pool)
    return first, total


def xz_overhead():
    inp = os.path.join(SHM, "xz.in")
    write_xz_text(inp)
    xz = ["xz", "-T2", "-6", "-c", "-k", inp]
    plain, runs = [], {"1s": [], "100ms": []}
    pool = os.path.join(SHM, "xz.pool")
    for r in range(REPS):
        plain.append(timed_cpu(xz))
        for i in runs:
            remove_present(pool)
            runs[i].append(timed_cpu([KIOKU, "run", "--pool", pool, "--interval", i, "--"] + xz))
        log(f"xz rep {r + 1}: plain {plain[-1][0]:.2f} s, " + ", ".join(f"{i} {runs[i][-1][0]:.2f} s" for i in runs))
    os.remove(inp)
    remove_present(pool)
    pw = statistics.median(w for w, _ in plain)
    pc = statistics.median(c for _, c in plain)
    rows = ["| interval | plain wall s | kioku wall s | wall overhead | plain CPU s | kioku CPU s | CPU overhead |", "|---|---|---|---|---|---|---|"]
    for i, v in runs.items():
        w = statistics.median(x for x, _ in v)
        c = statistics.median(x for _, x in v)
        rows.append(f"| {i} | {pw:.2f} | {w:.2f} | {100 * (w / pw - 1):+.1f} % | {pc:.2f} | {c:.2f} | {100 * (c / pc - 1):+.1f} % |")
    return rows


def main():
    out = []
    peers = []
    def version(cmd):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (out.stdout + out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "version unknown"

    # Versions, not paths: the section goes into the repository.
    peers.append(f"CRIU ({version([CRIU, '--version'])})" if CRIU else "CRIU: not found (set CRIU=path/to/criu), skipped")
    peers.append(f"DMTCP ({version([DMTCP_LAUNCH, '--version'])})" if DMTCP_LAUNCH else "DMTCP: not given (set DMTCP_LAUNCH=path/to/dmtcp_launch), skipped")
    for p in peers:
        log(p)
    out.append("Peers: " + "; ".join(peers) + ".\n")
    out.append(f"### Stop vs dirty MiB ({MIB} MiB program, {SECS:.0f} s, a checkpoint every {INTERVAL * 1000:.0f} ms; ms per checkpoint)\n")
    out.append("*reported*: kioku's stop (stop request to resume, median after the first three); *lost*: "
               "what the program lost per checkpoint, timed from inside (median of its slowest passes, one per "
               "checkpoint, less a plain run's median pass; includes write-protect faults after resuming); "
               "*plain: noise*: the same figure for a run without any checkpoint (the machine's own stalls); "
               "CRIU / DMTCP *dump* / *ckpt*: the command's time (a full dump each time).\n")
    rows, curves = stop_table()
    out += rows
    plot(curves)
    if PLOT:
        out.append(f"\n![stop vs dirty MiB](perf/{os.path.basename(PLOT)})")

    out.append(f"\n### First checkpoint\n")
    out.append(f"`kioku checkpoint` of the {MIB} MiB program (its first checkpoint: everything is copied):\n")
    out.append("| medium | `kioku checkpoint` returns (durable) ms | of which the stop ms | commit after the resume ms | then syncing the other context ms | CRIU dump ms |")
    out.append("|---|---|---|---|---|---|")
    for where, name in [(SHM, "/dev/shm"), (DISK, "ext4")]:
        ret, stop, durable, sync = first_request(where)
        c = criu_full(where) if CRIU else float("nan")
        out.append(f"| {name} | {ret:.0f} | {stop:.0f} | {durable:.0f} | {sync:.0f} | {'–' if c != c else f'{c:.0f}'} |")
        log(out[-1])
    inp = sort_input()
    firsts = [first_durable_sort(inp) for _ in range(SORT_REPS)]
    os.remove(inp)
    out.append(f"\n`sort -S 200M` of 100 MiB at `--interval 100ms`, {SORT_REPS} runs (the pool polled every 50 ms): first restorable checkpoint at "
               + ", ".join(f"{f:.2f} s" if f is not None else "never" for f, _ in firsts)
               + " after start; the runs took " + ", ".join(f"{t:.2f} s" for _, t in firsts) + ".")

    out.append("\n### xz -T2 -6 on 50 MiB of text (pool on /dev/shm; CPU of all processes, the monitor included; medians of "
               f"{REPS})\n")
    out += xz_overhead()
    print("\n".join(out))


if __name__ == "__main__":
    main()
