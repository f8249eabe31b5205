#!/usr/bin/env python3
"""Runs the group workloads under mpirun — kioku before and after (same run), and FTI — and
prints the Markdown body of the `group` perf section; draws docs/perf/group.png.

Environment (set by run.sh): BENCH_BIN (holds `workload` built against this tree's library,
`workload_before` against the earlier one, and `fti_workload` when FTI was given), BENCH_SHM
(a directory on /dev/shm), MIBS, MS, INTERVALS, PLOT (path of the PNG).
"""
import glob
import json
import os
import shutil
import subprocess
import sys

BIN = os.environ["BENCH_BIN"]
SHM = os.environ["BENCH_SHM"]
MIBS = [int(x) for x in os.environ.get("MIBS", "64 256").split()]
MS = [int(x) for x in os.environ.get("MS", "2 4").split()]
INTERVALS = int(os.environ.get("INTERVALS", "4"))
FROM = 2  # intervals averaged: FROM..INTERVALS
PLOT = os.environ.get("PLOT")
NP = 8
PAGE = 4096
HAVE_FTI = os.path.exists(os.path.join(BIN, "fti_workload"))

MPI_ENV = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1")


def mpirun(prog, args, env_extra, check=True):
    env = dict(os.environ)
    env.update(MPI_ENV)
    env.update(env_extra)
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(NP),
           os.path.join(BIN, prog)] + args
    print("  " + " ".join(f"{k}={v}" for k, v in env_extra.items()) + " " + " ".join(cmd[-4:]),
          file=sys.stderr)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if check and out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr[-4000:]}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]


def kioku_env(d, m):
    return dict(KIOKU_DIR=d, KIOKU_GROUP_SIZE=str(NP), KIOKU_PARITY=str(m), KIOKU_MEDIUM="shm")


def kioku(prog, w, mib, m, threads, pause_ms=0):
    d = os.path.join(SHM, "k")
    shutil.rmtree(d, ignore_errors=True)
    env = kioku_env(d, m)
    env["WORKLOAD_THREADS"] = str(threads)
    if pause_ms:
        env["WORKLOAD_PAUSE_MS"] = str(pause_ms)
    rows = mpirun(prog, [w, str(mib), str(INTERVALS)], env)
    shutil.rmtree(d)
    ivs = [r for r in rows if "interval" in r and r["interval"] >= FROM]
    # Epoch e is the checkpoint of interval e - 1.
    fls = [r for r in rows if "flight_epoch" in r and r["flight_epoch"] >= FROM + 1]
    changed = sum(r["dirty_pages"] for r in ivs) / len(ivs) * PAGE
    return dict(
        wait=sum(r["wait_ns"] for r in ivs) / len(ivs) / 1e6,
        durable=sum(r["durable_ns"] for r in fls) / len(fls) / 1e6 if fls else float("nan"),
        bytes=sum(r["bytes"] for r in fls) / len(fls) if fls else float("nan"),
        changed=changed,
        # Bytes the pool takes (holes of freed logs and journals not counted): at its peak
        # (sampled after each checkpoint call, and each encoding's own peak, its log complete)
        # and at rest (every encoding committed, at the end).
        pool=max([r["pool_alloc"] for r in rows if "pool_alloc" in r]
                 + [r.get("pool_peak", 0) for r in fls]) / (mib << 20),
        rest=[r["rest_pool_alloc"] for r in rows if "rest_pool_alloc" in r][0] / (mib << 20),
        interval=sum(r["interval_ns"] for r in ivs) / len(ivs) / 1e6,
        committed=all(r["committed"] for r in fls),
    )


FTI_CONFIG = """[basic]
head = 0
node_size = 1
ckpt_dir = {d}/local
glbl_dir = {d}/global
meta_dir = {d}/meta
ckpt_l1 = 0
ckpt_l2 = 0
ckpt_l3 = 0
ckpt_l4 = 0
inline_l2 = 1
inline_l3 = 1
inline_l4 = 1
keep_last_ckpt = 0
keep_l4_ckpt = 0
group_size = {g}
max_sync_intv = 0
ckpt_io = 1
enable_staging = 0
enable_dcp = 0
dcp_mode = 0
dcp_block_size = 16384
verbosity = 3
[restart]
failure = 0
exec_id = XXXX-XX-XX_XX-XX-XX
[injection]
rank = 0
number = 0
position = 0
frequency = 0
[advanced]
block_size = 1024
transfer_size = 16
general_tag = 2612
ckpt_tag = 711
stage_tag = 406
final_tag = 3107
local_test = 1
lustre_striping_unit = 4194304
lustre_striping_factor = -1
lustre_striping_offset = -1
"""


def fti_dir():
    d = os.path.join(SHM, "fti")
    shutil.rmtree(d, ignore_errors=True)
    for s in ["local", "global", "meta"]:
        os.makedirs(os.path.join(d, s))
    with open(os.path.join(d, "config.fti"), "w") as f:
        f.write(FTI_CONFIG.format(d=d, g=NP))
    return d


def du(path):
    total = 0
    for p in glob.glob(os.path.join(path, "**"), recursive=True):
        if os.path.isfile(p):
            total += os.stat(p).st_blocks * 512
    return total


def fti(w, mib):
    """FTI level 3 (RS over a group of 8, k = m = 8); files on /dev/shm. The last checkpoint's
    files are kept (the ranks exit without FTI_Finalize) to measure them."""
    d = fti_dir()
    rows = mpirun("fti_workload", [os.path.join(d, "config.fti"), w, str(mib), str(INTERVALS)],
                  {"FTI_CRASH_AFTER": str(INTERVALS)}, check=False)
    files = du(os.path.join(d, "local")) / NP
    shutil.rmtree(d)
    ivs = [r for r in rows if "interval" in r and r["interval"] >= FROM]
    if len(ivs) < INTERVALS - FROM + 1:
        sys.exit(f"fti_workload {w} {mib} ended early: {rows}")
    wait = sum(r["wait_ns"] for r in ivs) / len(ivs) / 1e6
    # The program's own memory (1x) plus its checkpoint and RS files.
    return dict(wait=wait, durable=wait, pool=1 + files / (mib << 20))


def recovery_kioku(prog, mib, m):
    d = os.path.join(SHM, "rec")
    shutil.rmtree(d, ignore_errors=True)
    env = kioku_env(d, m)
    mpirun(prog, ["mat", str(mib), "2"], env)
    os.remove(os.path.join(d, "job.3.pool"))
    rows = mpirun(prog, ["mat", str(mib), "2"], env)
    shutil.rmtree(d)
    return [r for r in rows if "recover_ns" in r][0]["recover_ns"] / 1e9


def recovery_fti(mib):
    d = fti_dir()
    cfg = os.path.join(d, "config.fti")
    mpirun("fti_workload", [cfg, "mat", str(mib), "2"], {"FTI_CRASH_AFTER": "2"}, check=False)
    shutil.rmtree(os.path.join(d, "local", "node3"))
    rows = mpirun("fti_workload", [cfg, "mat", str(mib), "2"], {})
    shutil.rmtree(d)
    rec = [r for r in rows if "recover_ns" in r][0]
    assert rec["recovered_progress"] == 2, rec
    return rec["recover_ns"] / 1e9


def ms(x):
    return f"{x:,.0f} ms"


results = []
fti_rows = {}
for w in ["mat", "lu"]:
    for mib in MIBS:
        if HAVE_FTI:
            fti_rows[(w, mib)] = fti(w, mib)
        for m in MS:
            before = kioku("workload_before", w, mib, m, 0)
            sync = kioku("workload", w, mib, m, 0)
            bg = kioku("workload", w, mib, m, 1)
            results.append(((w, mib, m), before, sync, bg))

names = {"mat": "MAT", "lu": "LU"}
out = []
out.append(
    f"{NP} ranks, one group of {NP}; {INTERVALS} intervals after the first checkpoint; "
    f"intervals {FROM}..{INTERVALS} averaged (the first checkpoint is a full encoding, and in "
    "the background mode the checkpoint of interval 1 waits for it). MAT writes about 1 % of "
    "the protected pages per interval, LU-like about 50 %. **before**: the library before this "
    "work; **after**: this tree's, encoding inside the call (MPI_Init); **after, bg**: the same, "
    "MPI_Init_thread(MPI_THREAD_MULTIPLE), so the rs level is encoded in the background. "
    "*wait*: the slowest rank's time in `kioku_group_checkpoint`; *durable*: from the call "
    "until the rs level committed (before and after: the same as wait); *sent ÷ changed*: "
    "bytes all ranks sent for an encoding over the bytes of the pages written; *pool*: the "
    "largest rank's pool over its protected data, in bytes the file system holds for it (the "
    "memory on /dev/shm; freed logs and journals are holes): *peak* while an encoding runs "
    "(its redo log complete), *rest* once every encoding committed (before: the same); the "
    "bound 2 + m/(g − m) is 2.33 at m = 2, 3.00 at m = 4. FTI: the program's memory plus its "
    "checkpoint and RS files; level 3, `Inline_L3 = 1`, RS over the group of 8 "
    "(k = m = 8: any 4 of 8 ranks may be lost, as kioku's m = 4).\n")
out.append("| workload | MiB/rank | m | wait: before / after / after, bg | durable, bg | FTI L3 | "
           "after ÷ before | after ÷ FTI | sent ÷ changed: before / after | pool ÷ data: "
           "before / after rest, peak / bg rest, peak / FTI |")
out.append("|---|---|---|---|---|---|---|---|---|---|")
for (w, mib, m), b, s, g in results:
    f = fti_rows.get((w, mib))
    best = min(s["wait"], g["wait"])
    out.append(
        f"| {names[w]} | {mib} | {m} | {ms(b['wait'])} / {ms(s['wait'])} / {ms(g['wait'])} "
        f"| {ms(g['durable'])} | {ms(f['wait']) if f else '–'} | {best / b['wait']:.2f} "
        f"| {best / f['wait'] if f else float('nan'):.3f} "
        f"| {b['bytes'] / b['changed']:.1f} / {s['bytes'] / s['changed']:.1f} "
        f"| {b['pool']:.2f} / {s['rest']:.2f}, {s['pool']:.2f} / {g['rest']:.2f}, {g['pool']:.2f} / "
        f"{f['pool'] if f else float('nan'):.2f} |")
if not HAVE_FTI:
    out.append("\nFTI was not given (FTI=dir of an FTI install), so its columns are empty.")
uncommitted = [k for k, _, s, g in results if not (s["committed"] and g["committed"])]
if uncommitted:
    out.append(f"\nEncodings that did not commit: {uncommitted}.")

out.append("")
out.append(f"Traffic when each rank writes its own random 1 % of the pages (`workload scatter`, "
           f"{MIBS[0]} MiB per rank; changes of one stripe page rarely come from two "
           "contributors): bytes sent per encoding ÷ bytes of the pages written.\n")
out.append("| m | before | after | wait: before / after |")
out.append("|---|---|---|---|")
for m in MS:
    b = kioku("workload_before", "scatter", MIBS[0], m, 0)
    a = kioku("workload", "scatter", MIBS[0], m, 0)
    out.append(f"| {m} | {b['bytes'] / b['changed']:.1f} | {a['bytes'] / a['changed']:.1f} "
               f"| {ms(b['wait'])} / {ms(a['wait'])} |")

# Background encoding where a core is free for it: a compute phase that leaves the core idle
# (PAUSE_MS of usleep per interval), inline against background, this tree's library.
out.append("")
out.append(f"Background encoding when the program's compute phase leaves its core idle "
           f"(`WORKLOAD_PAUSE_MS`: a usleep per interval, as a solver waiting on a GPU, I/O or "
           f"a neighbour; {MIBS[0]} MiB per rank): *interval*: the slowest rank's time from one "
           "checkpoint's return to the next (the pause, the compute, and the checkpoint); "
           "*wait*: its time in `kioku_group_checkpoint`; *durable*: from the call to the rs "
           "level's commit.\n")
out.append("| workload | m | pause | interval: inline / bg | bg ÷ inline | wait: inline / bg | "
           "durable: inline / bg |")
out.append("|---|---|---|---|---|---|---|")
PAUSES = [("mat", 300), ("lu", 3000)]
for w, pause in PAUSES:
    for m in MS:
        a = kioku("workload", w, MIBS[0], m, 0, pause)
        g = kioku("workload", w, MIBS[0], m, 1, pause)
        out.append(f"| {names[w]} | {m} | {ms(pause)} | {ms(a['interval'])} / "
                   f"{ms(g['interval'])} | {g['interval'] / a['interval']:.2f} "
                   f"| {ms(a['wait'])} / {ms(g['wait'])} | {ms(a['durable'])} / "
                   f"{ms(g['durable'])} |")

rec_mib = MIBS[0]
out.append("")
out.append(f"Recovery, {rec_mib} MiB per rank (MAT), one rank's checkpoint removed before the "
           "restart (the slowest rank's time from `kioku_group_init` to the end of `kioku_group_recover`; "
           "FTI: from `FTI_Init`, which rebuilds the lost files, to the end of `FTI_Recover`):\n")
out.append("| m | before | after | FTI L3 |")
out.append("|---|---|---|---|")
fti_rec = recovery_fti(rec_mib) if HAVE_FTI else None
for m in MS:
    rb = recovery_kioku("workload_before", rec_mib, m)
    ra = recovery_kioku("workload", rec_mib, m)
    out.append(f"| {m} | {rb:.2f} s | {ra:.2f} s | "
               f"{fti_rec if fti_rec is not None else float('nan'):.2f} s |")

if PLOT:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{names[w]} {mib}\nm={m}" for (w, mib, m), *_ in results]
    x = range(len(results))
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.8))
    wd = 0.2
    series = [("before", [b["wait"] for _, b, _, _ in results]),
              ("after", [s["wait"] for _, _, s, _ in results]),
              ("after, bg (wait)", [g["wait"] for _, _, _, g in results])]
    if HAVE_FTI:
        series.append(("FTI L3", [fti_rows[(w, mib)]["wait"] for (w, mib, _), *_ in results]))
    for i, (lab, ys) in enumerate(series):
        ax[0].bar([xi + (i - 1.5) * wd for xi in x], ys, wd, label=lab)
    ax[0].set_yscale("log")
    ax[0].set_ylabel("ms per checkpoint (slowest rank)")
    ax[0].set_title("time the program waits")
    ax[1].bar([xi - 0.2 for xi in x], [b["bytes"] / b["changed"] for _, b, _, _ in results], 0.4,
              label="before")
    ax[1].bar([xi + 0.2 for xi in x], [s["bytes"] / s["changed"] for _, _, s, _ in results], 0.4,
              label="after")
    ax[1].set_ylabel("bytes sent ÷ bytes changed")
    ax[1].set_title("traffic")
    pools = [("before", [b["pool"] for _, b, _, _ in results]),
             ("after, rest", [s["rest"] for _, _, s, _ in results]),
             ("after, peak", [s["pool"] for _, _, s, _ in results]),
             ("after, bg peak", [g["pool"] for _, _, _, g in results])]
    if HAVE_FTI:
        pools.append(("FTI L3", [fti_rows[(w, mib)]["pool"] for (w, mib, _), *_ in results]))
    pw = 0.8 / len(pools)
    for i, (lab, ys) in enumerate(pools):
        ax[2].bar([xi + (i - (len(pools) - 1) / 2) * pw for xi in x], ys, pw, label=lab)
    ax[2].plot(list(x), [2 + m / (NP - m) for (_, _, m), *_ in results], "k_", markersize=20,
               label="2 + m/(g−m)")
    ax[2].set_ylabel("memory ÷ protected data")
    ax[2].set_title("memory per rank")
    for a in ax:
        a.set_xticks(list(x))
        a.set_xticklabels(labels, fontsize=8)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=90)
    out.append(f"\n![group checkpoints: wait, traffic, memory]({os.path.basename(os.path.dirname(PLOT))}/{os.path.basename(PLOT)})")

print("\n".join(out))
