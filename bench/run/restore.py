#!/usr/bin/env python3
"""Restore time vs size: kioku (restore by mapping, and the earlier eager restore through
KIOKU_EAGER_RESTORE=1 as the baseline), CRIU and DMTCP, on the same program (bench/run/resume.c)
holding MIB MiB, checkpoint images on /dev/shm, tools interleaved run by run.

For each tool and size: run the program, let it write its memory, checkpoint it, kill it, then
time from the restore command's start to
  * "runs": the program runs again (it notices the gap on its own clock and notes the time);
  * "all read": it has since read every page of its memory once (what a lazy restore defers
    is paid by then).
Medians of REPS runs. Prints the markdown for docs/perf.md and writes the plot (PNG) given.

Environment: BENCH_BIN (resume built there), BENCH_SHM (a directory on /dev/shm), SIZES
(MiB, default "64 256 512 1024"), REPS (default 3), CRIU (criu binary), DMTCP_LAUNCH
(dmtcp_launch; its dmtcp_* siblings are used), PLOT (PNG path).
"""
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KIOKU = os.environ.get("KIOKU_BIN") or os.path.join(ROOT, "target/release/kioku")
BIN = os.environ["BENCH_BIN"]
SHM = os.environ["BENCH_SHM"]
SIZES = [int(s) for s in os.environ.get("SIZES", "64 256 512 1024").split()]
REPS = int(os.environ.get("REPS", "3"))
CRIU = os.environ.get("CRIU") or shutil.which("criu")
DMTCP_LAUNCH = os.environ.get("DMTCP_LAUNCH") or shutil.which("dmtcp_launch")
DEVNULL = subprocess.DEVNULL


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def wait_for(pred, secs, what):
    t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        v = pred()
        if v:
            return v
        time.sleep(0.005)
    raise SystemExit(f"timed out waiting for {what}")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def children(pid):
    try:
        return [int(x) for x in read(f"/proc/{pid}/task/{pid}/children").split()]
    except ValueError:
        return []


def result(logf, t0, secs=120):
    """Times (s) from t0 to the first "resumed" after t0 and the "pass" after it."""

    def parse():
        resumed = None
        for line in read(logf).splitlines():
            what, t = line.split()
            t = float(t)
            if what == "resumed" and t > t0 and resumed is None:
                resumed = t
            elif what == "pass" and resumed is not None and t > resumed:
                return resumed - t0, t - t0
        return None

    return wait_for(parse, secs, f"the program's notes in {logf}")


def ready(out):
    return wait_for(lambda: "ready" in read(out), 300, "the program to write its memory")


def kioku(mib, eager):
    d = os.path.join(SHM, "kioku")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    pool, out, logf = f"{d}/p.pool", f"{d}/out", f"{d}/log"
    env = dict(os.environ)
    env.pop("KIOKU_EAGER_RESTORE", None)
    run = subprocess.Popen([KIOKU, "run", "--pool", pool, "--interval", "0", "--", f"{BIN}/resume", str(mib), logf],
                           stdout=open(out, "w"), stderr=DEVNULL, cwd=d)
    ready(out)
    subprocess.run([KIOKU, "checkpoint", "--pool", pool], check=True, stdout=DEVNULL)
    for c in children(run.pid):
        os.kill(c, signal.SIGKILL)
    run.wait()
    if eager:
        env["KIOKU_EAGER_RESTORE"] = "1"
    t0 = time.monotonic()
    r = subprocess.Popen([KIOKU, "restore", "--pool", pool, "--interval", "0"], stdout=DEVNULL, stderr=DEVNULL, cwd=d, env=env)
    res = result(logf, t0)
    for c in children(r.pid):
        os.kill(c, signal.SIGKILL)
    r.wait()
    shutil.rmtree(d, ignore_errors=True)
    return res


def criu(mib):
    d = os.path.join(SHM, "criu")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(f"{d}/img")
    out, logf = f"{d}/out", f"{d}/log"
    # Init of its own pid namespace: its ids are free again at restore.
    outer = subprocess.Popen(["unshare", "--pid", "--fork", "setsid", f"{BIN}/resume", str(mib), logf],
                             stdout=open(out, "w"), stderr=DEVNULL, stdin=DEVNULL, cwd=d)
    ready(out)
    pid = wait_for(lambda: children(outer.pid), 5, "the program under unshare")[0]
    subprocess.run([CRIU, "dump", "-t", str(pid), "-D", f"{d}/img", "-o", "dump.log"], check=True, stderr=DEVNULL)
    outer.wait()
    t0 = time.monotonic()
    subprocess.run([CRIU, "restore", "-D", f"{d}/img", "-d", "-o", "restore.log", "--pidfile", f"{d}/pid"], check=True, stderr=DEVNULL)
    res = result(logf, t0)
    os.kill(int(read(f"{d}/pid")), signal.SIGKILL)
    shutil.rmtree(d, ignore_errors=True)
    return res


def dmtcp(mib):
    d = os.path.join(SHM, "dmtcp")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(f"{d}/img")
    out, logf = f"{d}/out", f"{d}/log"
    bindir = os.path.dirname(DMTCP_LAUNCH)
    port = str(7700 + os.getpid() % 200)

    def coordinator(name):
        return subprocess.Popen([f"{bindir}/dmtcp_coordinator", "--exit-on-last", "-p", port, "--ckptdir", f"{d}/img"],
                                stdin=DEVNULL, stdout=open(f"{d}/{name}", "w"), stderr=subprocess.STDOUT, cwd=d)

    c1 = coordinator("coord1")
    time.sleep(0.3)
    prog = subprocess.Popen([DMTCP_LAUNCH, "-p", port, "--ckptdir", f"{d}/img", "--no-gzip", f"{BIN}/resume", str(mib), logf],
                            stdout=open(out, "w"), stderr=DEVNULL, stdin=DEVNULL, cwd=d)
    ready(out)
    subprocess.run([f"{bindir}/dmtcp_command", "-p", port, "--checkpoint"], check=True, stdout=DEVNULL)
    wait_for(lambda: "Checkpoint complete. Wrote restart script" in read(f"{d}/coord1"), 300, "DMTCP's checkpoint")
    subprocess.run([f"{bindir}/dmtcp_command", "-p", port, "--kill"], stdout=DEVNULL)
    prog.wait()
    c1.wait()
    c2 = coordinator("coord2")
    time.sleep(0.3)
    img = [f"{d}/img/{f}" for f in os.listdir(f"{d}/img") if f.endswith(".dmtcp")]
    t0 = time.monotonic()
    r = subprocess.Popen([f"{bindir}/dmtcp_restart", "-p", port] + img, stdout=DEVNULL, stderr=DEVNULL, stdin=DEVNULL, cwd=d)
    res = result(logf, t0)
    subprocess.run([f"{bindir}/dmtcp_command", "-p", port, "--kill"], stdout=DEVNULL)
    r.wait()
    c2.wait()
    shutil.rmtree(d, ignore_errors=True)
    return res


def main():
    tools = [("kioku (by mapping)", lambda m: kioku(m, False)), ("kioku eager (baseline)", lambda m: kioku(m, True))]
    notes = []
    if CRIU and os.access(CRIU, os.X_OK):
        tools.append(("CRIU", criu))
    else:
        notes.append("CRIU not found (set CRIU=…/criu, see bench/run/peers.sh): skipped.")
    if DMTCP_LAUNCH and os.access(DMTCP_LAUNCH, os.X_OK):
        tools.append(("DMTCP", dmtcp))
    else:
        notes.append("DMTCP not found (set DMTCP_LAUNCH=…/dmtcp_launch, see bench/run/peers.sh): skipped.")
    for n in notes:
        log(n)
    res = {(t, m): [] for t, _ in tools for m in SIZES}
    for m in SIZES:
        for rep in range(REPS):
            for name, f in tools:
                r = f(m)
                res[(name, m)].append(r)
                log(f"{m} MiB rep {rep} {name}: runs {r[0] * 1e3:.0f} ms, all read {r[1] * 1e3:.0f} ms")
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
    names = [t for t, _ in tools]
    lines = ["| MiB | " + " | ".join(f"{n}: runs / all read ms" for n in names) + " | CRIU ÷ kioku (runs) |",
             "|---|" + "---|" * len(names) + "---|"]
    for m in SIZES:
        cells = [f"{med[(n, m)][0] * 1e3:,.0f} / {med[(n, m)][1] * 1e3:,.0f}" for n in names]
        ratio = f"{med[('CRIU', m)][0] / med[(names[0], m)][0]:.1f}" if "CRIU" in names else "–"
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {ratio} |")
    for n in notes:
        lines.append(f"\n{n}")
    plot = os.environ.get("PLOT")
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.2))
        for n in names:
            ax.plot(SIZES, [med[(n, m)][0] * 1e3 for m in SIZES], marker="o", label=f"{n}: runs again")
            ax.plot(SIZES, [med[(n, m)][1] * 1e3 for m in SIZES], marker="x", linestyle="--", label=f"{n}: all memory read")
        ax.set_xlabel("program memory (MiB)")
        ax.set_ylabel("ms from the restore command")
        ax.set_title("Restore time vs size (images on /dev/shm)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
        lines.append(f"\n![restore time vs size]({os.path.relpath(plot, os.path.join(ROOT, 'docs'))})")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
