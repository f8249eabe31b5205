#!/usr/bin/env python3
"""Two kioku-persist agent jars against each other on whole workloads, persistence active.

For a change to the agent or the runtime: the Workloads benchmarks (bench/persist's JMH jar)
in three configurations of the same benchmark JVM — no agent, agent jar A with persistence
active, agent jar B with persistence active (as in run.sh's overhead part) — in interleaved
rounds of one fork each, the order reversed every other round, so that both jars see the same
machine. Prints a Markdown table (medians of all measurement iterations of all forks, each
jar's overhead against no agent, and B ÷ A with the spread of the per-round ratios), to paste
into the `persist` section of docs/perf.md (run.sh rewrites that section whole).

Usage (after `bench/persist/run.sh` or `cd bench/persist && mvn -q package` built the JMH jar):
  bench/persist/compare.py A.jar B.jar [--regex R] [--rounds N] [--jmh ARGS] [--no-baseline]
--jmh: more JMH options (e.g. "-p medium=shm" for WriteBench); --no-baseline: no "no agent" forks
(benchmarks that need the agent, such as WriteBench, whose *_plain stores are the baseline).
Env: ITER (JMH iteration options, default "-wi 3 -w 1s -i 4 -r 500ms").
"""
import argparse
import atexit
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
JAR = os.path.join(HERE, "target", "benchmarks.jar")


def num(x):
    """A figure with about four significant digits, without exponents."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.4g}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--regex", default="kioku.bench.persist.Workloads")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jmh", default="")
    ap.add_argument("--no-baseline", action="store_true")
    args = ap.parse_args()
    it = shlex.split(os.environ.get("ITER", "-wi 3 -w 1s -i 4 -r 500ms"))
    work = tempfile.mkdtemp(prefix="kioku-compare-")
    shm = tempfile.mkdtemp(prefix="kioku-compare-", dir="/dev/shm")
    # Pools of the `file` medium (WriteBench -p medium=file) go on a disk filesystem, as run.sh's.
    os.makedirs(os.path.join(HERE, "target", "pools"), exist_ok=True)
    disk = tempfile.mkdtemp(prefix="compare-", dir=os.path.join(HERE, "target", "pools"))
    atexit.register(shutil.rmtree, shm, True)  # the pools' directories, even on failure
    atexit.register(shutil.rmtree, disk, True)
    jars = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    modes = ([] if args.no_baseline else [("none", [])]) + [
        (k, [f"-javaagent:{j}=instrument.exclude=org.openjdk.jmh,instrument.cache={work}/cache-{k}",
             "-Dkioku.bench.mode=active"]) for k, j in jars.items()]
    load0 = open("/proc/loadavg").read().split()[:3]
    t0 = time.monotonic()
    vals, per_round, units = {}, {}, {}
    for r in range(args.rounds):
        for mode, jvm in (modes if r % 2 == 0 else list(reversed(modes))):
            rff = os.path.join(work, f"{mode}-{r}.json")
            # Other work on the machine may run JMH too: its lock would fail the run, not
            # keep the machine quiet (the interleaved forks are what make the ratios fair).
            cmd = ["java", "-Djmh.ignoreLock=true", "-jar", JAR, args.regex, "-f", "1", "-foe", "true", "-rf", "json", "-rff", rff,
                   "-jvmArgsAppend", " ".join(["-Xms2g", "-Xmx2g", f"-Dkioku.bench.shm={shm}",
                                                    f"-Dkioku.bench.disk={disk}"] + jvm)] + it + \
                shlex.split(args.jmh)
            with open(os.path.join(work, f"{mode}-{r}.txt"), "w") as out:
                if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode:
                    sys.exit(f"JMH failed; see {out.name}")
            for res in json.load(open(rff)):
                b = res["benchmark"].rsplit(".", 1)[1]
                xs = [v for fork in res["primaryMetric"]["rawData"] for v in fork]
                vals.setdefault((b, mode), []).extend(xs)
                units[b] = res["primaryMetric"]["scoreUnit"]
                per_round.setdefault((b, mode), []).append(statistics.median(xs))
            print(f"round {r + 1}: {mode} done", file=sys.stderr, flush=True)
    # The pools' directories (each fork deletes its own pool; a failed run exits before this).
    shutil.rmtree(shm, ignore_errors=True)
    shutil.rmtree(disk, ignore_errors=True)
    minutes = (time.monotonic() - t0) / 60
    load1 = open("/proc/loadavg").read().split()[:3]
    benches = sorted({b for b, _ in vals})
    base = not args.no_baseline
    lines = [
        f"| benchmark | {'no agent | ' if base else ''}A: median (min of forks) | B: median (min of forks) | "
        f"{'A vs none | B vs none | ' if base else ''}B ÷ A (per-round range) |",
        "|---|" + ("---:|" * (6 if base else 3)),
    ]
    ga, gb, gr = [], [], []
    for b in benches:
        med = {m: statistics.median(vals[(b, m)]) for m in (["none"] if base else []) + ["A", "B"]}
        low = {m: min(per_round[(b, m)]) for m in med}
        rr = [y / x for x, y in zip(per_round[(b, "A")], per_round[(b, "B")])]
        gr.append(med["B"] / med["A"])
        cells = [f"`{b}` ({units[b]})"]
        if base:
            cells.append(num(med["none"]))
        cells += [f"{num(med['A'])} ({num(low['A'])})", f"{num(med['B'])} ({num(low['B'])})"]
        if base:
            ga.append(med["A"] / med["none"])
            gb.append(med["B"] / med["none"])
            cells += [f"{(ga[-1] - 1) * 100:+.0f} %", f"{(gb[-1] - 1) * 100:+.0f} %"]
        cells.append(f"{med['B'] / med['A']:.2f} ({min(rr):.2f}–{max(rr):.2f})")
        lines.append("| " + " | ".join(cells) + " |")

    def gm(xs):
        return math.exp(statistics.fmean(math.log(x) for x in xs))

    if base:
        lines.append(f"| **geometric mean** | | | | **{(gm(ga) - 1) * 100:+.0f} %** | **{(gm(gb) - 1) * 100:+.0f} %** | "
                     f"**{gm(gr):.2f}** |")
    else:
        lines.append(f"| **geometric mean** | | | **{gm(gr):.2f}** |")
    name = next((c for c in ("Workloads", "WriteBench", "ReadBench", "MakePersistentBench") if c in args.regex), "JMH")
    rel = {k: os.path.relpath(v, ROOT) if v.startswith(ROOT) else os.path.basename(v) for k, v in jars.items()}
    body = "\n".join([
        f"### Two agent jars compared ({name})",
        "",
        f"Command: `bench/persist/compare.py {rel['A']} {rel['B']} --regex '{args.regex}' "
        f"--rounds {args.rounds}{' --jmh ' + shlex.quote(args.jmh) if args.jmh else ''}"
        f"{' --no-baseline' if args.no_baseline else ''}` (ITER=\"{' '.join(it)}\"; {minutes:.0f} minutes; {time.strftime('%Y-%m-%d', time.gmtime())}); "
        f"load average {' '.join(load0)} at the start, {' '.join(load1)} at the end.",
        "",
        "Medians of every measurement iteration of every fork (in brackets: the lowest of the forks' "
        "medians, what a quiet machine approaches); JMH forks of the configurations interleaved, one "
        "per round, the order reversed every other round. *B ÷ A* is the ratio of the medians; in "
        "brackets the lowest and highest ratio within one round.",
        "",
    ] + lines)
    print(body)


if __name__ == "__main__":
    main()
