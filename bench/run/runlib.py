"""What the process-checkpoint benchmarks of bench/run/ share: timing a command with its CPU,
the xz input, and the files of one `kioku run` (its pool and its summary)."""
import json
import os
import random
import resource
import subprocess
import sys
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def timed_cpu(cmd, env=None):
    """Runs `cmd` (output discarded; a failure raises): (wall s, CPU s of the command and of
    everything it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=env)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid):
    """CPU seconds (user + system) process `pid` has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def watch_cpu(p):
    """Waits for Popen `p` to end, reading its own CPU time every 50 ms: the last reading (a
    process's CPU is gone from /proc once it is reaped)."""
    cpu = 0.0
    while p.poll() is None:
        try:
            cpu = cpu_of(p.pid)
        except (OSError, IndexError, ValueError):
            pass
        time.sleep(0.05)
    return cpu


def write_xz_text(path, mib=50):
    """`mib` MiB of text (lines of 12 words drawn from 5,000 random ones, seeded: every run
    and every benchmark compresses the same bytes) for the xz workloads."""
    rnd = random.Random(1)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9))) for _ in range(5000)]
    with open(path, "w") as f:
        n = 0
        while n < mib << 20:
            line = " ".join(rnd.choice(words) for _ in range(12)) + "\n"
            f.write(line)
            n += len(line)


def remove_present(*paths):
    """Removes those of `paths` that exist (a pool or summary left by the previous run)."""
    for p in paths:
        if os.path.exists(p):
            os.remove(p)


def read_summary(path):
    """The `summary` object of a `kioku run --summary-json` file."""
    with open(path) as f:
        return json.load(f)["summary"]
