#!/usr/bin/env python3
"""WriteBench's stores timed by the storing thread's CPU time (kioku.bench.persist.WriteCpu),
for two agent jars and a JVM without an agent, in interleaved JVMs.

On a loaded machine JMH's wall-clock average counts the time the benchmark thread waited for a
core, which swamps stores of tens of nanoseconds; the thread's CPU time does not. Each round
runs one JVM per configuration (no agent: the *_plain stores only; A; B), the order reversed
every other round; prints a Markdown table of the medians over rounds of each JVM's median
batch (100,000 invocations of 16 stores), ns of CPU per store, and B ÷ A.

Usage (after `cd bench/persist && mvn -q package` built the JMH jar):
  bench/persist/write_cpu.py A.jar B.jar [--rounds N] [--secs S] [--names a,b,...]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JAR = os.path.join(HERE, "target", "benchmarks.jar")
NAMES = ("putInt putLong putRef storeIntArray storeRefArray hashMapPut").split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=float, default=3.0)
    ap.add_argument("--names", default=",".join(NAMES))
    args = ap.parse_args()
    names = args.names.split(",")
    work = tempfile.mkdtemp(prefix="kioku-writecpu-")
    shm = tempfile.mkdtemp(prefix="kioku-writecpu-", dir="/dev/shm")
    jars = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    configs = [("none", [], "none", [n + "_plain" for n in names])] + [
        (k, [f"-javaagent:{j}=instrument.exclude=org.openjdk.jmh,instrument.cache={work}/cache-{k}",
             "-Dkioku.bench.mode=active"], "shm",
         [n + s for n in names for s in ("_plain", "_persistent")]) for k, j in jars.items()]
    load0 = open("/proc/loadavg").read().split()[:3]
    t0 = time.monotonic()
    got = {}
    try:
        for r in range(args.rounds):
            for mode, jvm, medium, benches in (configs if r % 2 == 0 else configs[::-1]):
                cmd = ["java", "-Xms2g", "-Xmx2g", f"-Dkioku.bench.shm={shm}", f"-Dkioku.bench.disk={work}"] \
                    + jvm + ["-cp", JAR, "kioku.bench.persist.WriteCpu", medium, str(args.secs)] + benches
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"{mode} failed:\n{out.stdout}\n{out.stderr}")
                for line in out.stdout.splitlines():
                    f = line.split()
                    if len(f) == 4 and f[0] in benches:
                        got.setdefault((f[0], mode), []).append(float(f[1]))
                print(f"round {r + 1}: {mode} done", file=sys.stderr)
    finally:
        shutil.rmtree(shm, True)
        shutil.rmtree(work, True)
    load1 = open("/proc/loadavg").read().split()[:3]
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"Command: `bench/persist/write_cpu.py A.jar B.jar --rounds {args.rounds} --secs {args.secs}` "
          f"({(time.monotonic() - t0) / 60:.0f} minutes, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); "
          f"load average {' '.join(load0)} at the start, {' '.join(load1)} at the end.\n")
    print("| store | no agent, plain | A: plain | B: plain | A: persistent | B: persistent | B ÷ A, persistent (per round) | B: persistent ÷ no agent | B: persistent ÷ B: plain |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in names:
        p, q = n + "_plain", n + "_persistent"
        none = med.get((p, "none"))
        ra = got.get((q, "A"), [])
        rb = got.get((q, "B"), [])
        rounds = ", ".join(f"{b / a:.2f}" for a, b in zip(ra, rb))
        a, b = med.get((q, "A")), med.get((q, "B"))
        print(f"| `{n}` | {none:.2f} | {med[(p, 'A')]:.2f} | {med[(p, 'B')]:.2f} | {a:.2f} | {b:.2f} | "
              f"{b / a:.2f} ({rounds}) | {b / none:.1f}× | {b / med[(p, 'B')]:.1f}× |")


if __name__ == "__main__":
    main()
