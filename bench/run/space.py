#!/usr/bin/env python3
"""Space a process checkpoint takes: pool size and monitor RSS against the program's peak RSS.

For each program (xz -9, a Python dict builder, sort -S 200M, a JVM with -Xmx2g, and a C program
that maps 8 GiB and touches 8 MiB), runs it plain under /usr/bin/time (its peak RSS, VmHWM of
every process summed as the kernel reports it for the tree's biggest member) and then under
`kioku run --medium shm --interval 1s` for each kioku binary given, sampling every 50 ms:
  * the pool file's allocated bytes (st_blocks * 512: the memory it takes on tmpfs) and length,
  * the monitor's VmRSS split into anonymous memory and mapped pool pages (RssShmem), VmHWM,
  * the largest stop and the capture's copied bytes from `--summary-json`.
Prints a markdown table (ratios: pool / peak RSS) and, with BENCH_PLOT, a bar chart.

Env: BENCH_BIN (directory with the compiled helpers: reserve), BENCH_SHM (scratch dir on tmpfs),
KIOKU_BINS ("label=path,label=path"), SPACE_PROGRAMS (comma list to run a subset),
BENCH_PLOT (PNG path).
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHM = os.environ.get("BENCH_SHM") or tempfile.mkdtemp(dir="/dev/shm")
BIN = os.environ.get("BENCH_BIN", SHM)
# Stop a run that would leave the machine without memory (the old code's JVM pools were GBs).
MIN_AVAILABLE = 3 << 30


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 60


def status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def prepare_inputs(work):
    """Inputs and programs (built once)."""
    import random

    rnd = random.Random(18)
    xz_in = os.path.join(work, "xz.in")
    if not os.path.exists(xz_in):
        words = [("%x" % rnd.getrandbits(40)).encode() for _ in range(4096)]
        with open(xz_in, "wb") as f:
            for _ in range(16 * MIB // 4096):
                chunk = b" ".join(rnd.choice(words) for _ in range(400))
                f.write(chunk[:3072] + os.urandom(1024))
    sort_in = os.path.join(work, "sort.in")
    if not os.path.exists(sort_in):
        with open(sort_in, "w") as f:
            for i in range(100 * MIB // 24):
                f.write("%016x %05d\n" % (rnd.getrandbits(64), i % 99991))
    classes = os.path.join(work, "classes")
    if not os.path.exists(os.path.join(classes, "Workers.class")):
        os.makedirs(classes, exist_ok=True)
        subprocess.run(
            ["javac", "-d", classes, os.path.join(ROOT, "examples/proc/java/Workers.java")],
            check=True,
        )
    py = os.path.join(work, "dicts.py")
    with open(py, "w") as f:
        f.write(
            "import time\n"
            "d = {}\n"
            "for i in range(1_500_000):\n"
            "    d[i] = str(i) * 3\n"
            "s = 0\n"
            "for r in range(3):\n"
            "    for k in range(0, 1_500_000, 7):\n"
            "        d[k] = d[k][::-1]\n"
            "    time.sleep(0.5)\n"
            "print(len(d))\n"
        )
    return {
        "xz -9": ["xz", "-9", "-T1", "-c", xz_in],
        "python": ["python3", py],
        "sort -S 200M": ["sort", "-S", "200M", sort_in],
        "JVM -Xmx2g": ["java", "-Xmx2g", "-cp", classes, "Workers", "4", "30", "60000"],
        "8 GiB mapped, 8 MiB touched": [os.path.join(BIN, "reserve"), "8192", "8", "4"],
    }


def plain_peak(cmd):
    """Peak RSS (KiB → bytes) of a plain run, as GNU time reports it (the largest process)."""
    r = subprocess.run(
        ["/usr/bin/time", "-f", "%M %e"] + cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    kib, secs = r.stderr.strip().splitlines()[-1].split()
    return int(kib) * 1024, float(secs)


def kioku_run(kioku, cmd, tag):
    pool = os.path.join(SHM, f"space-{tag}.pool")
    summary = os.path.join(SHM, f"space-{tag}.json")
    for p in (pool, summary):
        if os.path.exists(p):
            os.unlink(p)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [kioku, "run", "--pool", pool, "--medium", "shm", "--interval", "1s",
         "--summary-json", summary, "--"] + cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    peak = {"pool_alloc": 0, "pool_len": 0, "VmRSS": 0, "RssAnon": 0, "RssShmem": 0,
            "VmHWM": 0, "aborted": False}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                st = os.stat(pool)
                peak["pool_alloc"] = max(peak["pool_alloc"], st.st_blocks * 512)
                peak["pool_len"] = max(peak["pool_len"], st.st_size)
            except OSError:
                pass
            s = status(proc.pid)
            for k in ("VmRSS", "RssAnon", "RssShmem", "VmHWM"):
                if k in s:
                    peak[k] = max(peak[k], s[k])
            if mem_available() < MIN_AVAILABLE:
                peak["aborted"] = True
                os.killpg(proc.pid, 9)
                return
            time.sleep(0.05)

    th = threading.Thread(target=sample)
    th.start()
    _, err = proc.communicate()
    stop.set()
    th.join()
    wall = time.monotonic() - t0
    try:
        st = os.stat(pool)
        peak["pool_alloc_end"] = st.st_blocks * 512
        peak["pool_len_end"] = st.st_size
    except OSError:
        pass
    peak["wall"] = wall
    peak["status"] = proc.returncode
    try:
        with open(summary) as f:
            s = json.load(f)
        peak["summary"] = s.get("summary", s)
    except (OSError, ValueError):
        peak["summary"] = {}
        peak["stderr"] = err[-2000:]
    for p in (pool, summary):
        if os.path.exists(p):
            os.unlink(p)
    return peak


def main():
    bins = [tuple(b.split("=", 1)) for b in os.environ["KIOKU_BINS"].split(",")]
    work = os.path.join(SHM, "inputs")
    os.makedirs(work, exist_ok=True)
    progs = prepare_inputs(work)
    only = os.environ.get("SPACE_PROGRAMS")
    if only:
        want = [w.strip() for w in only.split(",")]
        progs = {k: v for k, v in progs.items() if any(k.startswith(w) for w in want)}
    rows = []
    # Rows of an earlier run of this script (its stderr), for kiokus not measured again (e.g.
    # main's, whose 8 GiB case takes 16 GiB of memory).
    reused = {}
    if os.environ.get("SPACE_REUSE"):
        with open(os.environ["SPACE_REUSE"]) as f:
            for line in f:
                if line.startswith("{"):
                    d = json.loads(line)
                    reused[(d["program"], d["kioku"])] = d
    for name, cmd in progs.items():
        for (prog, label), d in reused.items():
            if prog == name:
                r = {k: v for k, v in d.items() if k not in ("program", "kioku", "peak_rss", "plain_s")}
                r["summary"] = {**d.get("summary", {}), "reused": True}
                rows.append((name, label + " (earlier run)", d["peak_rss"], d["plain_s"], r))
        rss, secs = plain_peak(cmd)
        for label, kioku in bins:
            print(f"== {name} with {label}", file=sys.stderr)
            r = kioku_run(kioku, cmd, label.replace(" ", "_"))
            rows.append((name, label, rss, secs, r))
            print(json.dumps({"program": name, "kioku": label, "peak_rss": rss, "plain_s": secs,
                              **{k: v for k, v in r.items() if k != "summary"},
                              "summary": {k: r["summary"].get(k) for k in
                                          ("checkpoints", "stop_ms", "copied_bytes",
                                           "captured_bytes", "stopped_because")
                                          if isinstance(r["summary"], dict)}}),
                  file=sys.stderr)
    out = []
    out.append("| program | peak RSS (plain) | kioku | pool allocated (peak) | ÷ peak RSS | pool length "
               "| monitor VmHWM | monitor RSS: anon / pool pages (peak) | captured | longest stop "
               "| wall (plain) | checkpoints |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, label, rss, secs, r in rows:
        s = r["summary"] if isinstance(r["summary"], dict) else {}
        ck = s.get("checkpoints", "?")
        stops = s.get("stop_ms") or []
        longest = f"{max(stops):.0f} ms" if stops else "–"
        captured = f"{s['captured_bytes'] / MIB:.0f} MiB" if s.get("captured_bytes") else "–"
        note = " (stopped: out of memory guard)" if r["aborted"] else ""
        if r["status"] not in (0, None) and not r["aborted"]:
            note += f" (exit {r['status']})"
        out.append(
            f"| {name} | {rss / MIB:.0f} MiB | {label} | {r['pool_alloc'] / MIB:.0f} MiB "
            f"| **{r['pool_alloc'] / rss:.2f}×** | {r['pool_len'] / MIB:.0f} MiB "
            f"| {r['VmHWM'] / MIB:.0f} MiB | {r['RssAnon'] / MIB:.0f} / {r['RssShmem'] / MIB:.0f} MiB "
            f"| {captured} | {longest} | {r['wall']:.1f} s ({secs:.1f} s) | {ck}{note} |"
        )
    print("\n".join(out))
    plot = os.environ.get("BENCH_PLOT")
    if plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib missing: no plot (pip install matplotlib)", file=sys.stderr)
            return
        names = list(progs)
        labels = list(dict.fromkeys(l for _, l, _, _, _ in rows))
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        width = 0.8 / len(labels)
        for j, label in enumerate(labels):
            ratio = [next((r["pool_alloc"] / rss for n, l, rss, _, r in rows
                           if n == nm and l == label), float("nan")) for nm in names]
            mon = [next((r["VmHWM"] / MIB for n, l, _, _, r in rows
                         if n == nm and l == label), float("nan")) for nm in names]
            xs = [i + j * width for i in range(len(names))]
            axes[0].bar(xs, ratio, width, label=label)
            axes[1].bar(xs, mon, width, label=label)
        for ax, title in ((axes[0], "pool allocated ÷ program's peak RSS"),
                          (axes[1], "monitor VmHWM (MiB)")):
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))])
            ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
            ax.set_yscale("log")
            ax.set_title(title)
            ax.legend()
        axes[0].axhline(1.2, color="grey", linestyle="--", linewidth=0.8)
        axes[1].axhline(64, color="grey", linestyle="--", linewidth=0.8)
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
        print(f"plot: {plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
