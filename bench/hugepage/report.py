#!/usr/bin/env python3
"""Tables and plots for bench/hugepage/run.sh.

Usage: report.py RESULTS_DIR PLOT_DIR ROUNDS LONG_ROUNDS  -> Markdown on stdout, two PNGs in PLOT_DIR.
"""
import glob
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

res, plots, rounds, long_rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
FAST = float(os.environ.get("FAST_BUDGET") or "0")
PATTERNS = os.environ.get("PATTERNS", "seq random skewed").split()
MODES = ["default", "thp", "kioku-refault", "kioku-protnone"] + (["kioku-refault-fast", "kioku-protnone-fast"] if FAST else [])
LABEL = {
    "default": "Default (THP never)",
    "thp": "THP always",
    "kioku-refault": "kioku, refault probe",
    "kioku-protnone": "kioku, protection probe",
    "kioku-refault-fast": f"kioku, refault probe, steady budget {100 * FAST:.0f} %",
    "kioku-protnone-fast": f"kioku, protection probe, steady budget {100 * FAST:.0f} %",
}
STEADY = 10  # rounds at the end that make "steady state"


def load(path):
    if not os.path.exists(path):
        return [], [], None
    rounds_, mem, summary = [], [], None
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if d["kind"] == "round":
            rounds_.append(d)
        elif d["kind"] == "mem":
            mem.append(d)
        elif d["kind"] == "summary":
            summary = d
    return rounds_, mem, summary


def reps(prefix, pat, m):
    """Every repetition of one run, in order (files PREFIX-PAT-MODE-REP.jsonl)."""
    pat_re = re.compile(rf"^{re.escape(prefix)}-{re.escape(pat)}-{re.escape(m)}-(\d+)\.jsonl$")
    files = [f for f in glob.glob(f"{res}/{prefix}-{pat}-{m}-*.jsonl") if pat_re.match(os.path.basename(f))]
    files.sort(key=lambda f: int(pat_re.match(os.path.basename(f)).group(1)))
    return [load(f) for f in files]


def med(xs):
    xs = [x for x in xs if x is not None and x == x]
    return statistics.median(xs) if xs else float("nan")


def steady(rs):
    return statistics.median(r["mib_s"] for r in rs[-STEADY:]) if rs else float("nan")


def final_mem(rs):
    return statistics.median(r["mem_kib"] for r in rs[-STEADY:]) / 1024 if rs else float("nan")


def converged(rs, target):
    """First round from which the median of 5 rounds stays within 5 % of `target`."""
    for i in range(len(rs) - 4):
        window = [r["mib_s"] for r in rs[i:]]
        if statistics.median(window[:5]) >= 0.95 * target:
            return i
    return None


def stopped_at(rs):
    """Seconds from the start until sampling stopped (placement settled), None if it did not."""
    for r in rs:
        if r.get("settled"):
            return r["t"]
    return None


def table(prefix, patterns):
    out = []
    out.append(
        "| pattern | mode | steady MiB/s | vs Default | vs THP always | memory MiB | extra over Default | share of THP's extra | promoted | compacted | collapse ms | within 5 % of final at round | sampling stopped at s |"
    )
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    verdicts = {}
    for pat in patterns:
        data = {m: reps(prefix, pat, m) for m in MODES}
        tp_of = {m: med(steady(r[0]) for r in data[m]) for m in MODES}
        mem_of = {m: med(final_mem(r[0]) for r in data[m]) for m in MODES}
        base, thp = tp_of["default"], tp_of["thp"]
        mbase, mthp = mem_of["default"], mem_of["thp"]
        for m in MODES:
            if not data[m]:
                continue
            tp, mm = tp_of[m], mem_of[m]
            extra = mm - mbase
            share = "—" if m in ("default", "thp") else f"{100 * extra / (mthp - mbase):.1f} %" if mthp - mbase > 1 else "—"
            conv = med(converged(r[0], steady(r[0])) for r in data[m]) if m.startswith("kioku") else None
            stops = [stopped_at(r[0]) for r in data[m]] if m.startswith("kioku") else []
            stop = "—" if not stops else ("never" if None in stops else f"{med(stops):.1f}")
            summs = [r[2] for r in data[m] if r[2]]
            promoted = f"{med(x['promoted'] for x in summs):.0f}" if summs else "—"
            compacted = f"{med(x['compacted'] for x in summs):.0f}" if summs else "—"
            collapse = f"{med(x['collapse_ms'] for x in summs):.0f}" if summs else "—"
            out.append(
                f"| {pat} | {LABEL[m]} | {tp:,.0f} | {tp / base:.3f} | {tp / thp:.3f} | {mm:,.0f} | {extra:+,.0f} | "
                f"{share} | {promoted} | {compacted} | {collapse} | {'—' if conv is None or conv != conv else f'{conv:.0f}'} | {stop} |"
            )
            if m.startswith("kioku"):
                verdicts[(pat, m)] = (tp / thp, (extra / (mthp - mbase)) if mthp - mbase > 1 else None)
    return "\n".join(out), verdicts


def plot(prefix, patterns, path, what, title):
    fig, axes = plt.subplots(1, len(patterns), figsize=(5.2 * len(patterns), 3.8), squeeze=False)
    for ax, pat in zip(axes[0], patterns):
        for m in MODES:
            runs = reps(prefix, pat, m)
            if not runs:
                continue
            rs, mem, _ = runs[0]  # the first repetition
            if what == "throughput" and rs:
                ax.plot([r["round"] for r in rs], [r["mib_s"] / 1024 for r in rs], label=LABEL[m], lw=1)
            if what == "memory" and mem:
                ax.plot([x["t"] for x in mem], [x["mem_kib"] / 1024 for x in mem], label=LABEL[m], lw=1)
        ax.set_title(f"{pat}")
        ax.set_xlabel("round" if what == "throughput" else "seconds")
        ax.set_ylabel("GiB/s accessed" if what == "throughput" else "memory (MiB)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


lines = []
main_table, v_main = table("main", PATTERNS)
long_table, v_long = table("long", ["skewed"])
n_main = len(reps("main", "skewed", "default"))
n_long = len(reps("long", "skewed", "default"))
lines.append(f"### Throughput and memory, {rounds} rounds ({n_main} repetitions)\n")
lines.append(
    "Each mode ran the given number of times, in turn with the others; every figure is the median over the "
    "repetitions (the plots show the first). kioku runs with its defaults: a steady sampling budget of "
    "1 % of one CPU (counting the faults the program takes on sampled pages), 10 % while placement "
    "converges; sampling stops once placement settles. "
    "Steady state = median of the last 10 rounds. Memory = anonymous + file RSS + the arena memfd's pages "
    "(mapped or not), median of the last 10 rounds. \"Share of THP's extra\" = kioku's extra memory over "
    "Default divided by THP always's (target ≤ 5 %).\n"
)
lines.append(main_table)
if n_long:
    lines.append(f"\n### Skewed access, {long_rounds} rounds ({n_long} repetition{'s' if n_long != 1 else ''})\n")
    lines.append(long_table)

os.makedirs(plots, exist_ok=True)
plot("main", PATTERNS, f"{plots}/hugepage-throughput.png", "throughput", f"Throughput per round ({rounds} rounds)")
plot("main", PATTERNS, f"{plots}/hugepage-memory.png", "memory", f"Memory over time ({rounds} rounds)")
lines.append("\n![throughput per round](hugepage-throughput.png)\n![memory over time](hugepage-memory.png)\n")
if n_long:
    plot("long", ["skewed"], f"{plots}/hugepage-skewed-long.png", "throughput", f"Skewed, {long_rounds} rounds")
    lines.append("![skewed, long run](hugepage-skewed-long.png)\n")

# Target on the skewed benchmark.
lines.append("### Target: skewed, ≥ THP always's throughput with ≤ 5 % of its extra memory\n")
for (pat, m), (ratio, share) in sorted({**{(str(rounds), k[1]): v for k, v in v_main.items() if k[0] == "skewed"}, **{(str(long_rounds), k[1]): v for k, v in v_long.items()}}.items()):
    ok_tp = ratio >= 1.0
    ok_mem = share is not None and share <= 0.05
    lines.append(
        f"- {pat} rounds, {LABEL[m]}: throughput {ratio:.3f} × THP always ({'met' if ok_tp else 'NOT met'}); "
        f"extra memory {'n/a' if share is None else f'{100 * share:.1f} %'} of THP's ({'met' if ok_mem else 'NOT met'})."
    )

# Tracker cost.
cost_lines = [x for x in open(f"{res}/cost.jsonl")] if os.path.exists(f"{res}/cost.jsonl") else []
if cost_lines:
    lines.append("\n### Tracker cost per scan (populated, idle memory; sample 4,096 pages per scan, runs of 64 pages)\n")
    lines.append("| backend | GiB tracked | median scan µs | µs per scan per GiB | rotation (every page observed once) ms | ms per GiB per full pass |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for line in cost_lines:
        d = json.loads(line)
        rot = d["rotation_ms"]  # one full pass: every page observed once
        lines.append(
            f"| {d['backend']} | {d['gib']:.2f} | {d['scan_median_us']:,.0f} | {d['scan_median_us'] / d['gib']:,.0f} | "
            f"{rot:,.1f} | {rot / d['gib']:,.1f} |"
        )
    lines.append(
        "\nA scan costs the same whatever the size (it observes the sample, not the address space); the only "
        "per-address-space work is one `PAGEMAP_SCAN` per rotation that lists the populated pages. The seed's "
        "kernel thread walked all page tables at 37 ms per GiB per scan.\n"
    )

# Overhead.
def rounds_of(path):
    out = []
    for x in open(path):
        try:
            d = json.loads(x)
        except json.JSONDecodeError:
            continue
        if d.get("kind") == "round":
            out.append(d)
    return out


lines.append("### Tracking overhead on the workload (sampling, no placement; default budget)\n")
lines.append(
    "Sampling only (the application places), with the defaults: 10 % of a CPU while converging, then the "
    "steady 1 %. Each tracked run is compared with its baseline run (run just before it, the same rounds, "
    "the first two left out): median, lowest and highest of the per-pair ratios. The noise row compares "
    "two untracked runs the same way (each baseline with the next repetition's): what this machine's "
    "load alone does to a ratio.\n"
)
lines.append("| pattern | backend | baseline | pairs | tracked / baseline, median | lowest | highest |")
lines.append("|---|---|---|---:|---:|---:|---:|")


def ratio(b, t):
    n = min(len(b), len(t))
    if n < 5:
        return None
    return med(r["mib_s"] for r in t[2:n]) / med(r["mib_s"] for r in b[2:n])


for pat in ["skewed", "random"]:
    for base, tr, name in [("default", "track-protnone", "protection"), ("default-shm", "track-refault", "refault"),
                           ("default", "default", "noise: untracked vs untracked"), ("default-shm", "default-shm", "noise: untracked vs untracked")]:
        rs = []
        files = sorted(glob.glob(f"{res}/overhead-*-{pat}-{base}.jsonl"), key=lambda f: int(f.split("overhead-")[1].split("-")[0]))
        for k, f in enumerate(files):
            rep_ = f.split("overhead-")[1].split("-")[0]
            if tr == base:
                if k + 1 >= len(files):
                    continue
                tf = files[k + 1]
            else:
                tf = f"{res}/overhead-{rep_}-{pat}-{tr}.jsonl"
            if not os.path.exists(tf):
                continue
            r = ratio(rounds_of(f), rounds_of(tf))
            if r is not None:
                rs.append(r)
        if rs:
            lines.append(f"| {pat} | {name} | {base} | {len(rs)} | {med(rs):.3f} | {min(rs):.3f} | {max(rs):.3f} |")
print("\n".join(lines))
