#!/usr/bin/env python3
"""kioku-persist benchmarks, all in one run (see bench/persist/run.sh):

1. overhead: whole workloads (Workloads.java) with no agent, with the agent and no pool, and
   with the agent, a pool open and something persistent; rounds interleave the three
   configurations (one JMH fork each), alternating their order;
2. reads of persistent vs identical non-persistent objects, same JVM configuration (ReadBench);
3. stores into persistent vs non-persistent objects per medium, and without the agent
   (WriteBench);
4. make_persistent of fresh graphs per medium, against a deep copy in ordinary memory
   (MakePersistentBench);
   and with 1 and 2 threads;
5. recovery time of ~1 GB persistent heaps (small objects; arrays) in a fresh JVM with its peak
   RSS, against building the same graph in ordinary memory (RecoveryMain);
6. JVM start-up with and without the agent, its cache, and a new pool (StartupMain).

Prints the Markdown body of the `persist` section of docs/perf.md on stdout; progress on stderr.
Raw JMH results are kept in $BENCH_OUT. Environment: see run.sh.
"""
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

JAR = os.environ["BENCH_JAR"]
AGENT = os.environ["BENCH_AGENT"]
SHM = os.environ["BENCH_SHM"]
DISK = os.environ["BENCH_DISK"]
OUT = os.environ["BENCH_OUT"]


def env_int(name, default):
    return int(os.environ.get(name, default))


ROUNDS = env_int("ROUNDS", 2)  # overhead: forks per configuration, interleaved
WI = env_int("WI", 5)  # overhead: warmup iterations of 1 s
MI = env_int("MI", 5)  # overhead: measurement iterations of 0.5 s
SWI = env_int("SWI", 3)  # reads, writes, make_persistent: warmup iterations of 0.5 s
SMI = env_int("SMI", 5)  # reads, writes, make_persistent: measurement iterations of 0.4 s
FORKS = env_int("FORKS", 2)  # make_persistent: forks per benchmark
RROUNDS = env_int("RROUNDS", 3)  # reads: rounds of one fork per benchmark
WFORKS = env_int("WFORKS", 1)  # writes: forks per benchmark and medium
REC_GB = float(os.environ.get("REC_GB", "1.0"))  # recovery: replica bytes, 10^9
REC_REPS = env_int("REC_REPS", 5)

HEAP = ["-Xms2g", "-Xmx2g"]
DIRS = [f"-Dkioku.bench.shm={SHM}", f"-Dkioku.bench.disk={DISK}"]
# The harness (JMH's own classes: Blackhole, the iteration control) is not instrumented.
AGENT_ARG = f"-javaagent:{AGENT}=instrument.exclude=org.openjdk.jmh"
ITER = ["-wi", str(WI), "-w", "1s", "-i", str(MI), "-r", "500ms"]
SHORT_ITER = ["-wi", str(SWI), "-w", "500ms", "-i", str(SMI), "-r", "400ms"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- statistics

def _betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-12:
            break
    return h


def _ibeta(a, b, x):
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1 - x) / b


def t_quantile(p, df):
    """The p-quantile (p > 0.5) of Student's t with df degrees of freedom, by bisection."""
    def cdf(t):
        return 1.0 - 0.5 * _ibeta(df / 2.0, 0.5, df / (df + t * t))
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def summary(values):
    """(mean, error): error as JMH prints it, the half-width of the 99.9% confidence interval."""
    n = len(values)
    m = statistics.fmean(values)
    if n < 2:
        return m, float("nan")
    return m, t_quantile(0.9995, n - 1) * statistics.stdev(values) / math.sqrt(n)


def ratio(a, b):
    """a/b with the errors of a and b combined (relative errors in quadrature)."""
    (ma, ea), (mb, eb) = a, b
    r = ma / mb
    return r, r * math.sqrt((ea / ma) ** 2 + (eb / mb) ** 2)


def fmt(x, digits=None):
    if x != x:
        return "?"
    if digits is None:
        ax = abs(x)
        digits = 0 if ax >= 1000 else 1 if ax >= 100 else 2 if ax >= 1 else 3
    return f"{x:,.{digits}f}"


def pm(s, digits=None):
    return f"{fmt(s[0], digits)} ± {fmt(s[1], digits)}"


def rate(x):
    """A per-second rate, short: 3.56 M, 812 k, 54.3."""
    if x >= 1e6:
        return f"{x / 1e6:.3g} M"
    if x >= 1e3:
        return f"{x / 1e3:.3g} k"
    return f"{x:.3g}"


def pct(r):
    return f"{(r[0] - 1) * 100:+.1f} % ± {r[1] * 100:.1f}"


# ---------------------------------------------------------------- JMH

RUNS = []  # (what, seconds)


def jmh(name, regex, jvm_args, extra=()):
    """Runs JMH; returns (list of result dicts, fork output text)."""
    rff = os.path.join(OUT, name + ".json")
    txt = os.path.join(OUT, name + ".txt")
    cmd = ["java", "-jar", JAR, regex, "-foe", "true", "-rf", "json", "-rff", rff,
           "-jvmArgsAppend", " ".join(HEAP + DIRS + jvm_args)] + list(extra)
    log("  " + name)
    t0 = time.monotonic()
    with open(txt, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    RUNS.append((name, time.monotonic() - t0))
    text = open(txt).read()
    if p.returncode != 0 or not os.path.exists(rff):
        raise SystemExit(f"JMH {name} failed ({p.returncode}); see {txt}")
    results = json.load(open(rff))
    if not results:
        raise SystemExit(f"JMH {name}: no results; see {txt}")
    return results, text


def raw(r):
    """All measurement iterations of one result, every fork."""
    return [v for fork in r["primaryMetric"]["rawData"] for v in fork]


def short(r):
    return r["benchmark"].rsplit(".", 1)[1]


# ---------------------------------------------------------------- 1. overhead

WORKLOADS = [
    ("hashMap", "HashMap: word counts, 200k words"),
    ("treeMap", "TreeMap: 30k puts, floorKey, removes"),
    ("arrayList", "ArrayList: 50k adds, sort, dedupe"),
    ("mergeSort", "merge sort, 100k longs (app code)"),
    ("nbody", "n-body, 20k steps (putfield double)"),
    ("jsonParse", "Jackson: parse JSON into beans"),
    ("jsonWrite", "Jackson: write beans as JSON"),
    ("bzip2", "commons-compress bzip2, 64 KiB"),
    ("xz", "XZ for Java (LZMA2), 64 KiB"),
    ("guava", "Guava: multimap, TreeMultiset, ImmutableSortedMap of 200k words"),
    ("commonsMath", "commons-math: 120×120 LU inverse, 16k FFT, statistics"),
]
THIRD_PARTY = {"jsonParse", "jsonWrite", "bzip2", "xz", "guava", "commonsMath"}
MODES = [
    ("none", []),
    ("agent", [AGENT_ARG]),
    ("active", [AGENT_ARG, "-Dkioku.bench.mode=active"]),
]


def overhead():
    log("== overhead (Workloads): %d rounds x %d configurations" % (ROUNDS, len(MODES)))
    values = {}  # (bench, mode) -> [iteration values]
    forks = []  # per fork: its iterations
    for rnd in range(ROUNDS):
        order = MODES if rnd % 2 == 0 else list(reversed(MODES))
        for mode, args in order:
            res, _ = jmh(f"overhead-r{rnd + 1}-{mode}", "kioku.bench.persist.Workloads", args, ["-f", "1"] + ITER)
            for r in res:
                values.setdefault((short(r), mode), []).extend(raw(r))
                forks += r["primaryMetric"]["rawData"]
    lines = [
        "| workload | no agent, ms/op | agent, no pool, ms/op | agent vs none: means | medians | target ≤ 5 % | persistence active, ms/op | active vs none: means | medians |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    geo = {"agent": [], "active": [], "agent_med": [], "active_med": []}
    verdicts = []
    for b, label in WORKLOADS:
        s = {m: summary([v / 1000 for v in values[(b, m)]]) for m, _ in MODES}
        ra = ratio(s["agent"], s["none"])
        rc = ratio(s["active"], s["none"])
        med = {m: statistics.median(values[(b, m)]) for m, _ in MODES}
        geo["agent"].append(ra[0])
        geo["active"].append(rc[0])
        geo["agent_med"].append(med["agent"] / med["none"])
        geo["active_med"].append(med["active"] / med["none"])
        ok = "met" if ra[0] <= 1.05 else ("within error" if ra[0] - ra[1] <= 1.05 else "**MISSED**")
        verdicts.append((b, ok))
        lines.append(
            f"| {label} (`{b}`) | {pm(s['none'])} | {pm(s['agent'])} | {pct(ra)} | "
            f"{(geo['agent_med'][-1] - 1) * 100:+.1f} % | {ok} | {pm(s['active'])} | {pct(rc)} | "
            f"{(geo['active_med'][-1] - 1) * 100:+.1f} % |"
        )

    def gm(xs):
        return math.exp(statistics.fmean(math.log(x) for x in xs))

    g = {k: gm(v) for k, v in geo.items()}
    lines.append(
        f"| **geometric mean** | | | **{(g['agent'] - 1) * 100:+.1f} %** | **{(g['agent_med'] - 1) * 100:+.1f} %** | "
        f"{'met' if g['agent'] <= 1.05 else '**MISSED**'} (means), {'met' if g['agent_med'] <= 1.05 else '**MISSED**'} (medians) | | "
        f"**{(g['active'] - 1) * 100:+.1f} %** | **{(g['active_med'] - 1) * 100:+.1f} %** |")
    warming = sum(1 for f in forks if len(f) > 2 and f[0] > 1.5 * statistics.fmean(f[-2:]))
    lines.append(
        f"\nWarm-up check: in {warming} of the {len(forks)} forks the first measurement iteration "
        f"took more than 1.5× the mean of the last two (JIT compilation still going on, or load).")
    active_by = [(b, geo["active_med"][i]) for i, (b, _) in enumerate(WORKLOADS)]
    return "\n".join(lines), {"active_by": active_by, "agent_geo": g["agent"], "agent_geo_med": g["agent_med"],
                               "active_geo": g["active"], "active_geo_med": g["active_med"], "verdicts": verdicts}


def profile_active():
    """JFR of two collection workloads with persistence active: where the time goes."""
    log("== profile (JFR, persistence active)")
    d = os.path.join(OUT, "jfr")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    jmh("profile-active", "kioku.bench.persist.Workloads.(arrayList|treeMap)$",
        [AGENT_ARG, "-Dkioku.bench.mode=active", f"-XX:StartFlightRecording=filename={d}/,settings=profile"],
        ["-f", "1", "-wi", "2", "-w", "1s", "-i", "4", "-r", "1s"])
    jfr = os.path.join(os.path.dirname(os.path.realpath(subprocess.run(
        ["bash", "-c", "command -v java"], capture_output=True, text=True).stdout.strip())), "jfr")
    out = []
    for f in sorted(os.listdir(d)):
        if not f.endswith(".jfr"):
            continue
        txt = subprocess.run([jfr, "print", "--events", "jdk.ExecutionSample", os.path.join(d, f)],
                             capture_output=True, text=True).stdout
        selfc, incl, n = {}, {}, 0
        for ev in txt.split("jdk.ExecutionSample")[1:]:
            frames = re.findall(r"^\s+([\w.$<>/]+)\(.*?\)\s+line:", ev, re.M)
            if not frames:
                continue
            n += 1
            selfc[frames[0]] = selfc.get(frames[0], 0) + 1
            for fr in set(frames):
                incl[fr] = incl.get(fr, 0) + 1
        if not n:
            continue
        bench = max(("arrayList", "treeMap"), key=lambda b: incl.get("kioku.bench.persist.Workloads." + b, 0))
        top = sorted(selfc.items(), key=lambda kv: -kv[1])[:6]
        out.append(f"`{bench}` ({n} samples), most frequent top frames: " + "; ".join(
            f"`{fr.split('.')[-2]}.{fr.split('.')[-1]}` {100 * c / n:.0f} %" for fr, c in top) + ".")
    return out


# ---------------------------------------------------------------- 2. reads

READS = [
    ("sumIntArray", "sum of an int[1M] (4 MiB)"),
    ("traverseList", "traverse a linked list of 256k nodes"),
    ("hashMapGet", "16k HashMap.get on a 64k-entry map (half miss)"),
]


READ_VERDICT = []


def reads():
    log("== reads (ReadBench)")
    # Rounds of one fork per benchmark: JMH runs each read's persistent and plain forks one
    # after the other, so every pair sees about the same machine.
    vals, text = {}, ""
    for rnd in range(RROUNDS):
        res, t = jmh(f"reads-r{rnd + 1}", "kioku.bench.persist.ReadBench", [AGENT_ARG], ["-f", "1"] + SHORT_ITER)
        text += t
        for r in res:
            vals.setdefault(short(r), []).extend(raw(r))
    by = {b: summary(v) for b, v in vals.items()}
    lines = [
        "| read | non-persistent, µs/op | persistent, µs/op | persistent ÷ non-persistent | difference measurable? |",
        "|---|---:|---:|---:|---|",
    ]
    for b, label in READS:
        p, q = by[b + "_plain"], by[b + "_persistent"]
        r = ratio(q, p)
        measurable = "no (within error)" if abs(r[0] - 1) <= r[1] else "**yes**"
        READ_VERDICT.append((b, r, measurable))
        lines.append(f"| {label} | {pm(p)} | {pm(q)} | {fmt(r[0], 3)} ± {fmt(r[1], 3)} | {measurable} |")
    # The same reads in one JVM, the two copies timed in alternating blocks.
    cmd = ["java"] + HEAP + DIRS + ["-XX:-PrintWarnings", AGENT_ARG, "-cp", JAR, "kioku.bench.persist.ReadAlternating"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    RUNS.append(("reads-alternating", time.monotonic() - t0))
    if p.returncode != 0:
        raise SystemExit(f"ReadAlternating failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    alt = {}
    for name, a, b in re.findall(r"^ROUND read=(\w+) plain=(\S+) persistent=(\S+)$", p.stdout, re.M):
        alt.setdefault(name, []).append((float(a), float(b)))
    lines += [
        "",
        "The same reads in one JVM (`ReadAlternating`, agent and pool as above): both copies "
        "timed in alternating blocks of 100 passes, the order swapped every round; 10 rounds of "
        "warm-up, then:",
        "",
        "| read | rounds | non-persistent, µs/pass | persistent, µs/pass | persistent ÷ non-persistent, per round (mean ± error) | difference measurable? |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for b, label in READS:
        pairs = alt.get(b, [])
        if not pairs:
            continue
        r = summary([y / x for x, y in pairs])
        measurable = "no (within error)" if abs(r[0] - 1) <= r[1] else "**yes**"
        READ_VERDICT.append((b + " (one JVM)", r, measurable))
        lines.append(f"| {label} | {len(pairs)} | {pm(summary([x for x, _ in pairs]))} | "
                     f"{pm(summary([y for _, y in pairs]))} | {fmt(r[0], 3)} ± {fmt(r[1], 3)} | {measurable} |")
    stats = re.findall(r"KIOKU-STATS reads objects=(\d+) usedBytes=(\d+)", text)
    note = ""
    if stats:
        note = f"\n\nPersistent in each fork: {int(stats[0][0]):,} objects, {int(stats[0][1]) / 2**20:.1f} MiB of replicas."
    return "\n".join(lines) + note


# ---------------------------------------------------------------- 3. writes

WRITES = [
    ("putInt", "putfield int"),
    ("putLong", "putfield long"),
    ("putRef", "putfield reference (to a persistent object)"),
    ("storeIntArray", "int[] element store"),
    ("storeRefArray", "Object[] element store (a persistent object)"),
    ("hashMapPut", "HashMap.put, existing key (+ a get)"),
]


WRITE_RATIOS = []  # (store, (persistent ÷ non-persistent on shm, error))


def writes():
    log("== writes (WriteBench)")
    by = {}
    floors = {}
    for b, _ in WRITES:
        # Each store's forks run next to a fork of the medium's floor, so that both see the same
        # disk (its latency changes with what else runs on the machine).
        res, _ = jmh(f"writes-{b}", f"kioku.bench.persist.WriteBench.({b}_plain|{b}_persistent|durableFloor)$",
                     [AGENT_ARG], ["-f", str(WFORKS), "-p", "medium=shm,file"] + SHORT_ITER)
        for r in res:
            key = (short(r), r["params"]["medium"])
            if short(r) == "durableFloor":
                floors[(b, r["params"]["medium"])] = summary(raw(r))
            else:
                by[key] = summary(raw(r))
    lines = [
        "| store | shm: non-persistent, ns | shm: persistent, ns | ÷ non-persistent | ÷ floor | file: non-persistent, ns | file: persistent, ns | ÷ non-persistent | file: floor (next to it), ns | ÷ floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    shm_floor = [floors[(b, "shm")][0] for b, _ in WRITES]
    for b, label in WRITES:
        cells = [label]
        WRITE_RATIOS.append((b, ratio(by[(b + "_persistent", "shm")], by[(b + "_plain", "shm")])))
        for med in ("shm", "file"):
            p, q = by[(b + "_plain", med)], by[(b + "_persistent", med)]
            fl = floors[(b, med)]
            cells += [pm(p), pm(q), f"{fmt(ratio(q, p)[0], 1)}×"]
            if med == "file":
                cells.append(pm(fl))
            cells.append(f"{fmt(q[0] / fl[0], 2 if med == 'file' else 1)}×")
        lines.append("| " + " | ".join(cells) + " |")
    note = (f"\n\nThe shm floor (store + full fence, no kioku) measured {min(shm_floor):.2f} to "
            f"{max(shm_floor):.2f} ns in its {len(shm_floor)} forks.")
    return "\n".join(lines) + note


# ---------------------------------------------------------------- 4. make_persistent

SHAPES = [
    ("items-1000", "linked list of 1,000 objects (4 slots each)"),
    ("items-10000", "linked list of 10,000 objects (4 slots each)"),
    ("longs-1048576", "one long[1,048,576] (8 MiB)"),
]


MP_SCALING = []  # (shape, (throughput with 2 threads ÷ with 1, error))


def make_persistent():
    log("== make_persistent (MakePersistentBench)")
    shapes = ",".join(s for s, _ in SHAPES)
    res0, _ = jmh("mp-copy", "kioku.bench.persist.MakePersistentBench.copy", [],
                  ["-f", str(FORKS), "-p", "medium=none", "-p", "shape=" + shapes] + SHORT_ITER)
    res1, text = jmh("mp-persist", "kioku.bench.persist.MakePersistentBench.persist", [AGENT_ARG],
                     ["-f", str(FORKS), "-p", "medium=shm,file", "-p", "shape=" + shapes] + SHORT_ITER)
    # One and two threads on shm, each thread assigning its own root: throughput scaling.
    scale = {}
    for t in (1, 2):
        res, _ = jmh(f"mp-threads-{t}", "kioku.bench.persist.MakePersistentBench.persist", [AGENT_ARG],
                     ["-f", str(FORKS), "-t", str(t), "-p", "medium=shm", "-p", "shape=items-10000,longs-1048576"]
                     + SHORT_ITER)
        for r in res:
            scale[(r["params"]["shape"], t)] = summary(raw(r))
    by = {}
    for r in res0 + res1:
        by[(short(r), r["params"]["medium"], r["params"]["shape"])] = summary(raw(r))
    rb = dict(re.findall(r"KIOKU-STATS make_persistent (\S+) replicaBytes=(\d+)", text))
    gc = {}
    growth = []
    for med, shape, objs, used, cap, gcs in re.findall(
            r"KIOKU-STATS make_persistent (\w+) (\S+) end objects=(\d+) usedBytes=(\d+) capacityBytes=(\d+) gcRuns=(\d+)", text):
        gc.setdefault((med, shape), []).append(f"{gcs} GCs, {int(cap) >> 20} MiB")
        live = int(rb.get(shape, 0) or 1)
        if shape.startswith("longs") and int(gcs) == 0 and int(cap) > (64 << 20) and int(cap) >= 8 * live:
            growth.append((med, shape, int(objs), int(used), int(cap), live))
    lines = [
        "| graph | objects | words (8 B) | replica bytes allocated | deep copy, no agent, µs | medium | make_persistent, µs | objects/s | words/s | MB/s of words | × deep copy | per fork at the end: persistent GCs, pool heap capacity |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    rows = {}
    for shape, label in SHAPES:
        objs = int(shape.split("-")[1]) if shape.startswith("items") else 1
        words = 5 * objs if shape.startswith("items") else int(shape.split("-")[1]) + 1
        c = by[("copy", "none", shape)]
        for med in ("shm", "file"):
            p = by[("persist", med, shape)]
            sec = p[0] / 1e6
            g = gc.get((med, shape), [])
            rows[(med, shape)] = (objs / sec, words / sec)
            lines.append(
                f"| {label} | {objs:,} | {words:,} | {int(rb.get(shape, 0)):,} | {pm(c)} | {med} | {pm(p)} | "
                f"{rate(objs / sec)} | {rate(words / sec)} | {words * 8 / sec / 1e6:,.0f} | {fmt(ratio(p, c)[0], 1)} | "
                f"{'; '.join(g) if g else '?'} |"
            )
    if growth:
        med, shape, objs, used, cap, live = max(growth, key=lambda g: g[4])
        lines.append(
            f"\n**Finding: the persistent heap grows instead of collecting** when each "
            f"make_persistent replaces one large array: one fork of `{shape}` on `{med}` ended with "
            f"{cap >> 20} MiB of heap capacity and {used / 2**20:.0f} MiB in use for "
            f"{live / 2**20:.1f} MiB of live replicas, with 0 persistent GCs; {objs} objects still "
            f"counted persistent (the replaced arrays, never turned white). Why: the GC runs only "
            f"when, before a make_persistent, more than 90 % of the heap is in use, and the heap "
            f"grows by a 64 MiB section when an allocation does not fit; a 64 MiB section holds "
            f"{(64 << 20) // live} replicas of {live:,} B, i.e. {100 * ((64 << 20) // live) * live / (64 << 20):.1f} % of it, "
            f"so the heap never passes 90 % and it adds a section per {(64 << 20) // live} arrays "
            f"instead: the pool file keeps growing (on shm, in memory). "
            f"({len(growth)} of the forks above show it.)")
    lines += ["", "Threads (shm, %d forks each; each thread assigns a fresh graph to its own root; "
              "JMH's time per operation is per thread, so throughput = threads ÷ time):" % FORKS, "",
              "| graph | 1 thread: µs/op | 1 thread: ops/s | 2 threads: µs/op (each) | 2 threads: ops/s | scaling 1 → 2 |",
              "|---|---:|---:|---:|---:|---:|"]
    for shape, label in SHAPES:
        if (shape, 1) not in scale:
            continue
        a, b = scale[(shape, 1)], scale[(shape, 2)]
        t1, t2 = 1e6 / a[0], 2e6 / b[0]
        r = ratio(a, b)
        MP_SCALING.append((shape, (2 * r[0], 2 * r[1])))
        lines.append(f"| {label} | {pm(a)} | {t1:,.0f} | {pm(b)} | {t2:,.0f} | {2 * r[0]:.2f} ± {2 * r[1]:.2f}× |")
    return "\n".join(lines), rows


# ---------------------------------------------------------------- 5. recovery

def result_line(out):
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    raise SystemExit("no RESULT line in:\n" + out[-3000:])


def java_main(args, agent):
    cmd = ["java", "-Xmx8g", "-XX:-PrintWarnings"] + ([AGENT_ARG.split("=")[0]] if agent else []) + \
          ["-cp", JAR, "kioku.bench.persist.RecoveryMain"] + args
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    RUNS.append(("recovery " + args[0], time.monotonic() - t0))
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return result_line(p.stdout)


REC_SHAPES = [
    ("objects", "small objects: linked lists of 8,192 objects (4 slots each)"),
    ("arrays", "arrays: long[40,960] (320 KiB each)"),
]


def recovery_of(shape):
    pool = os.path.join(SHM, "recovery.pool")
    if os.path.exists(pool):
        os.remove(pool)
    target = int(REC_GB * 1e9)
    b = java_main(["build", pool, shape, str(target)], True)
    log(f"  built {shape}: {b}")
    pool_bytes = os.path.getsize(pool)
    rec, plain = [], []
    for i in range(REC_REPS):
        r = java_main(["recover", pool, shape], True)
        if r["checksum"] != b["checksum"] or r["graphObjects"] != b["graphObjects"]:
            raise SystemExit(f"recovered graph differs from the built one: {r} vs {b}")
        rec.append(r)
        plain.append(java_main(["plain", shape, b["chunks"]], False))
        if plain[-1]["checksum"] != b["checksum"]:
            raise SystemExit("plain graph differs from the built one")
        log(f"  recover {shape} {i + 1}: {r['seconds']} s (open {r['openSeconds']}, roots {r['rootSeconds']}, "
            f"peak RSS {int(r['peakRssKiB']) >> 10} MiB); plain build {plain[-1]['seconds']} s, "
            f"peak RSS {int(plain[-1]['peakRssKiB']) >> 10} MiB")
    os.remove(pool)
    used = int(b["usedBytes"])
    gb = used / 1e9
    tot = summary([float(r["seconds"]) for r in rec])
    per_gb = (tot[0] / gb, tot[1] / gb)
    rss = summary([int(r["peakRssKiB"]) / 1024 for r in rec])
    prss = summary([int(p["peakRssKiB"]) / 1024 for p in plain])
    return {
        "b": b, "pool_bytes": pool_bytes, "used": used, "tot": tot, "per_gb": per_gb,
        "open": summary([float(r["openSeconds"]) for r in rec]),
        "roots": summary([float(r["rootSeconds"]) for r in rec]),
        "trav": summary([float(r["traverseSeconds"]) for r in rec]),
        "plain": summary([float(p["seconds"]) for p in plain]),
        # CPU time of the whole process (GC threads too): what a loaded machine stretches least.
        "cpu": summary([float(r["cpuSeconds"]) for r in rec]),
        "pcpu": summary([float(p["cpuSeconds"]) for p in plain]),
        "build_cpu": float(b["cpuSeconds"]),
        "build_gcs": int(b["gcRuns"]),
        "rss": rss, "prss": prss, "build_per_gb": float(b["seconds"]) / gb,
    }


def recovery():
    log("== recovery (RecoveryMain)")
    res = {shape: recovery_of(shape) for shape, _ in REC_SHAPES}
    lines = [
        f"Two heaps of about {REC_GB:g} GB of replicas, each many chunks under one root (an Object[]): "
        f"see the table for what a chunk is. Built by make_persistent of one chunk at a time in a JVM "
        f"with the agent (pool on /dev/shm, medium shm). Each recovery is a fresh JVM (`-Xmx8g`) "
        f"timed from just before `KiokuPersist.open(pool, \"shm\")` to just after initializing the "
        f"root's class, whose `rootsDeclared` assigns the recovered graph (open rolls back undo logs, "
        f"checks and marks from the roots and rebuilds the allocator; the objects are rebuilt when "
        f"the root's class loads); the graph's checksum is then compared with the built one. "
        f"Baseline: a fresh JVM without the agent building the same graph with `new` (same "
        f"checksum). Peak RSS = the process's VmHWM at the end (for a recovery it includes the "
        f"pool's pages it mapped and read).",
        "",
        "| heap | objects | GB of replicas | built by make_persistent, s (s/GB) | `open`, s | root's class, s | **recovery, s** | **s/GB** | build with `new`, s | recovery ÷ `new` | peak RSS recovery, MiB | peak RSS `new`, MiB | RSS ÷ `new` |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, label in REC_SHAPES:
        x = res[shape]
        lines.append(
            f"| {label} | {int(x['b']['graphObjects']):,} | {x['used'] / 1e9:.3f} | "
            f"{float(x['b']['seconds']):.1f} ({x['build_per_gb']:.1f}) | {pm(x['open'], 3)} | {pm(x['roots'], 3)} | "
            f"**{pm(x['tot'], 3)}** | **{pm(x['per_gb'], 3)}** | {pm(x['plain'], 3)} | "
            f"{fmt(ratio(x['tot'], x['plain'])[0], 2)}× | {pm(x['rss'], 0)} | {pm(x['prss'], 0)} | "
            f"{x['rss'][0] / x['prss'][0]:.2f}× |")
    lines.append(f"\n{REC_REPS} recoveries and {REC_REPS} builds with `new` per heap, interleaved; "
                 f"first traversal of the recovered graph (not included): "
                 + "; ".join(f"{shape} {pm(res[shape]['trav'], 3)} s" for shape, _ in REC_SHAPES) + ".")
    lines.append("\nCPU time of the whole process (all threads, the JVM's collections included), which the "
                 "machine's load stretches far less than wall time: "
                 + "; ".join(
                     f"{shape}: recovery {pm(res[shape]['cpu'], 2)} s, build with `new` {pm(res[shape]['pcpu'], 2)} s "
                     f"({fmt(ratio(res[shape]['cpu'], res[shape]['pcpu'])[0], 2)}×), make_persistent of the heap "
                     f"{res[shape]['build_cpu']:.1f} s ({res[shape]['build_gcs']} persistent GCs)"
                     for shape, _ in REC_SHAPES) + ".")
    return "\n".join(lines), res


# ---------------------------------------------------------------- 6. start-up

START = {}
START_RUNS = env_int("START_RUNS", 20)


def startup():
    log("== start-up (StartupMain): %d interleaved rounds" % START_RUNS)
    cache = os.path.join(OUT, "transform-cache")
    main = ["-cp", JAR, "kioku.bench.persist.StartupMain"]
    agent = f"-javaagent:{AGENT}=instrument.cache={cache}"
    configs = [
        ("plain", "no agent", ["java"] + main),
        ("agent", "agent, JDK classes from the cache", ["java", agent] + main),
        ("nocache", "agent, cache off (as the first start)",
         ["java", f"-javaagent:{AGENT}=instrument.cache=off"] + main),
        ("pool", "agent (cache) and a new pool, a HashMap made persistent",
         ["java", agent] + main + ["pool", SHM]),
    ]
    times = {k: [] for k, _, _ in configs}
    for rnd in range(START_RUNS + 2):
        order = configs if rnd % 2 == 0 else list(reversed(configs))
        for k, _, cmd in order:
            t0 = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True)
            dt = time.monotonic() - t0
            if p.returncode != 0 or not p.stdout.startswith("ok 3"):
                raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
            if rnd >= 2:  # the first two fill the cache and the page cache
                times[k].append(dt)
    for f in os.listdir(SHM):
        if f.startswith("startup-"):
            os.remove(os.path.join(SHM, f))
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = [
        "| JVM | wall time, s: median | mean ± error | minimum | − no agent (medians) |",
        "|---|---:|---:|---:|---:|",
    ]
    for k, label, _ in configs:
        lines.append(f"| {label} | {med[k]:.3f} | {pm(summary(times[k]), 3)} | {min(times[k]):.3f} | "
                     + ("" if k == "plain" else f"+{med[k] - med['plain']:.3f}") + " |")
    START.update(agent_delta=med["agent"] - med["plain"], nocache_delta=med["nocache"] - med["plain"],
                 pool_delta=med["pool"] - med["plain"])
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def main():
    os.makedirs(OUT, exist_ok=True)
    only = set(os.environ.get("ONLY", "startup,overhead,reads,writes,make_persistent,recovery").split(","))
    parts = []
    if "overhead" in only:
        table, o = overhead()
        prof = profile_active() if os.environ.get("PROFILE", "1") != "0" else []
        if prof:
            table += ("\n\nWhere the time goes with persistence active (JFR execution samples of one "
                      "fork each, `settings=profile`; `Barrier.maybePersistent` holds the fence, "
                      "`SideTable.find` the lookup of a JDK object's or an array's replica word by "
                      "identity hash):\n\n" + "\n".join("- " + p for p in prof))
        parts.append((
            "### 1. Overhead of the agent on whole workloads",
            "JMH, average time per operation, JIT on. Three configurations of the same benchmark "
            "JVM, in %d interleaved rounds (one fork each per round, the order of the "
            "configurations reversed every other round): **no agent**; **agent, no pool** "
            "(`-javaagent:kioku-persist.jar`: every store in application classes and in the "
            "retransformed java.util collections calls the barrier, whose fast path is one volatile "
            "read); **persistence active** (the agent, a pool open on /dev/shm, and a HashMap of "
            "two objects assigned to a `@DurableRoot`, so every barrier in the JVM also checks the "
            "written object's replica word: a field read for application objects, a look at the "
            "mark word for an identity hash, then a side-table lookup, for arrays and JDK "
            "collections; writers fence only for 100 ms after a make_persistent, see "
            "docs/persist.md). Nothing the "
            "workloads write is persistent. JMH's own classes are not instrumented "
            "(`instrument.exclude=org.openjdk.jmh`). The thesis measured DaCapo, which is not "
            "available here; these are its stand-ins (collections, a JSON library, two pure-Java "
            "compressors, a sort, putfield-heavy numerics)." % ROUNDS,
            table))
    if "reads" in only:
        parts.append((
            "### 2. Reads of persistent objects",
            "JMH, %d rounds of one fork per benchmark (a read's two forks run one after the other), "
            "with the agent and a pool on /dev/shm. Every fork builds two identical "
            "copies of each structure and assigns one to a `@DurableRoot` (so persistence is "
            "active in both cases); each benchmark reads one copy with the same code. Target: no "
            "measurable difference (the agent adds nothing to reads)." % RROUNDS,
            reads()))
    if "writes" in only:
        parts.append((
            "### 3. Stores into persistent objects, per medium",
            "JMH, %d fork(s) per benchmark and medium; ns per store (16 read-modify-write stores "
            "per operation). *non-persistent* = the same store into an identical object that is "
            "not persistent, in the same JVM (pool open, persistence active: the barrier fences and "
            "checks the replica word). A store into a persistent object also writes the replica and "
            "makes it durable before returning: on `shm` (pool on /dev/shm) with fences; on `file` "
            "(pool in `bench/persist/target/pools`, a disk filesystem: `%s`) with an `msync` of the "
            "page. *The medium's floor*, measured in a fork next to each store's forks, is one 8-byte "
            "store into a mapped file on the same filesystem made durable the same way, without "
            "kioku (file: `MappedByteBuffer.force` of 8 bytes; shm: a full fence). `dax` "
            "(MAP_SYNC on persistent memory) is not available on this machine. `HashMap.put` on a "
            "persistent map is a failure-atomic section (undo log)."
            % (WFORKS, os.environ.get("BENCH_DISK_FS", "?")),
            writes()))
    mp_rows = None
    if "make_persistent" in only:
        table, mp_rows = make_persistent()
        parts.append((
            "### 4. make_persistent throughput",
            "JMH, %d forks; each operation assigns a freshly built graph (built outside the "
            "timed part) to a `@DurableRoot`: replicas allocated, copied, verified, flushed, one "
            "drain, root updated. The graph it replaces becomes garbage in the pool, which the "
            "persistent heap's GC reclaims when 90%% full (its runs are part of the time, as in a "
            "program that keeps replacing its state). Words = 8-byte replica slots including each "
            "object's header (replica bytes allocated = after size-class rounding). Baseline: a "
            "deep copy of the same graph in ordinary memory, no agent." % FORKS,
            table))
    rec = None
    if "recovery" in only:
        table, rec = recovery()
        parts.append(("### 5. Recovery time per GB, and make_persistent of 1 GB", "", table))
    if "startup" in only:
        parts.append((
            "### 6. Start-up",
            "Wall time of a whole JVM running a program that fills a HashMap and prints a line "
            "(`StartupMain`, from the benchmarks jar), %d rounds of the four configurations, "
            "interleaved, the order reversed every other round, after two rounds not counted. "
            "The agent rewrites the supported JDK classes (ASM) at its start; from the second "
            "start on it takes them from its cache (`instrument.cache`, see docs/persist.md). "
            "Application classes are rewritten as they load, in every start." % START_RUNS,
            startup()))
    goals = []
    if "overhead" in only:
        missed = [b for b, v in o["verdicts"] if v == "**MISSED**"]
        goals.append(
            f"- Overhead of the agent without a pool ≤ 5 %: geometric mean {(o['agent_geo'] - 1) * 100:+.1f} % "
            f"(of medians {(o['agent_geo_med'] - 1) * 100:+.1f} %); "
            + (f"missed by `{'`, `'.join(missed)}`" if missed else "no workload over it beyond its error")
            + f". With persistence active ≤ 10 %: geometric mean {(o['active_geo'] - 1) * 100:+.1f} % "
            f"(of medians {(o['active_geo_med'] - 1) * 100:+.1f} %), "
            + ("met" if o['active_geo'] <= 1.10 else "**MISSED**")
            + "; third-party libraries (persistence active ÷ no agent, medians): "
            + ", ".join(f"`{b}` {(m - 1) * 100:+.0f} %" for b, m in o["active_by"] if b in THIRD_PARTY) + ".")
    if READ_VERDICT:
        goals.append("- Reads of persistent objects, no measurable difference: " + "; ".join(
            f"`{b}` {r[0]:.3f} ± {r[1]:.3f} ({m})" for b, r, m in READ_VERDICT) + ".")
    if START:
        d = START["agent_delta"]
        goals.append(f"- Agent start-up ≤ 0.15 s: +{d:.3f} s (median, JDK classes from the cache), "
                     + ("met" if d <= 0.15 else "**MISSED**")
                     + f"; first start without the cache +{START['nocache_delta']:.3f} s; "
                     f"with a new pool +{START['pool_delta']:.3f} s.")
    if WRITE_RATIOS:
        goals.append("- Stores into persistent objects ≤ 5× an ordinary store on shm: " + "; ".join(
            f"`{b}` {r[0]:.1f}× ({'met' if r[0] <= 5 else ('**MISSED** (5× is within its error)' if r[0] - r[1] <= 5 else '**MISSED**')})"
            for b, r in WRITE_RATIOS) + ".")
    if MP_SCALING:
        goals.append("- make_persistent throughput from 1 to 2 threads: " + "; ".join(
            f"`{sh}` {r[0]:.2f} ± {r[1]:.2f}×" for sh, r in MP_SCALING)
            + " (make_persistent is serialised by the heap lock: no scaling is expected).")
    if rec:
        o_, a_ = rec["objects"], rec["arrays"]
        ok = lambda v, t: "met" if v <= t else "**MISSED**"
        goals.append(f"- Recovery ≤ 2 s/GB for small objects: {o_['per_gb'][0]:.2f} ± {o_['per_gb'][1]:.2f} s/GB, "
                     f"{ok(o_['per_gb'][0], 2)} (arrays: {a_['per_gb'][0]:.2f} s/GB).")
        r_new = o_["tot"][0] / o_["plain"][0]
        goals.append(f"- Recovery ≤ 2× building with `new` (small objects): {r_new:.2f}×, {ok(r_new, 2)} "
                     f"(arrays: {a_['tot'][0] / a_['plain'][0]:.2f}×).")
        r_rss = o_["rss"][0] / o_["prss"][0]
        goals.append(f"- Peak RSS ≤ 1.5× the plain heap (small objects): {r_rss:.2f}×, {ok(r_rss, 1.5)} "
                     f"(arrays: {a_['rss'][0] / a_['prss'][0]:.2f}×).")
        goals.append(f"- make_persistent of 1 GB ≤ 10 s: small objects {o_['build_per_gb']:.1f} s/GB, "
                     f"{ok(o_['build_per_gb'], 10)}; arrays {a_['build_per_gb']:.1f} s/GB, {ok(a_['build_per_gb'], 10)} "
                     f"(one chunk per make_persistent, as built for the recovery above).")
    if goals:
        parts.append(("### Targets", "", "\n".join(goals)))
    out = []
    for title, text, table in parts:
        out += [title, ""]
        if text:
            out += [text, ""]
        out += [table, ""]
    print("\n".join(out))
    log("run times: " + ", ".join(f"{n} {s:.0f}s" for n, s in RUNS))


if __name__ == "__main__":
    main()
