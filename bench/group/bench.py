#!/usr/bin/env python3
"""Runs bench/group/workload.c under mpirun and prints the Markdown body of the perf section.

Environment: BENCH_BIN (holds `workload`), BENCH_SHM (pool directory root on /dev/shm),
MIB, INTERVALS.
"""
import json
import os
import shutil
import subprocess
import sys

BIN = os.environ["BENCH_BIN"]
SHM = os.environ["BENCH_SHM"]
MIB = int(os.environ.get("MIB", "256"))
INTERVALS = int(os.environ.get("INTERVALS", "8"))
NP = 8


def mpirun(args, env_extra, pool_dir):
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_mpi_yield_when_idle="1",
        KIOKU_DIR=pool_dir,
        KIOKU_GROUP_SIZE=str(NP),
        KIOKU_PARITY="2",
        KIOKU_MEDIUM="shm",
    )
    env.update(env_extra)
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(NP),
           os.path.join(BIN, "workload")] + args
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]


def run(workload, full):
    d = os.path.join(SHM, f"{workload}-{full}")
    rows = mpirun([workload, str(MIB), str(INTERVALS)], {"KIOKU_FULL": str(full)}, d)
    shutil.rmtree(d)
    return rows


def avg(rows, key):
    rs = [r[key] for r in rows if r["interval"] >= 1]
    return sum(rs) / len(rs)


def mib(b):
    return f"{b / 2**20:,.1f} MiB" if b >= 2**20 else f"{b / 1024:,.0f} KiB"


out = []
targets = {"mat": (99.0, 90.0), "lu": (40.0, 40.0)}
names = {"mat": "MAT (C = A×B, 2 rows of C per interval)",
         "lu": "LU-like (trailing-submatrix updates)"}
out.append(f"{NP} ranks × {MIB} MiB protected each ({NP * MIB} MiB in all), "
           f"{INTERVALS} intervals after the first checkpoint.\n")
out.append("| workload | mode | bytes sent / ckpt | ckpt time | encode time | pages written / encoded (all ranks) |")
out.append("|---|---|---|---|---|---|")
summary = []
for w in ["mat", "lu"]:
    full = run(w, 1)
    delta = run(w, 0)
    for mode, rows in [("(a) full + full RS", full), ("(b) incremental delta parity", delta)]:
        out.append(
            f"| {w} | {mode} | {mib(avg(rows, 'bytes'))} | {avg(rows, 'ckpt_ns') / 1e6:,.0f} ms "
            f"| {avg(rows, 'encode_ns') / 1e6:,.0f} ms | {avg(rows, 'dirty_pages'):,.0f} / "
            f"{avg(rows, 'encoded_pages'):,.0f} |")
    fewer = 100 * (1 - avg(delta, "bytes") / avg(full, "bytes"))
    less = 100 * (1 - avg(delta, "ckpt_ns") / avg(full, "ckpt_ns"))
    tb, tt = targets[w]
    summary.append(
        f"| {names[w]} | {fewer:.2f} % fewer (target ≥ {tb:g} %: "
        f"{'met' if fewer >= tb else 'missed'}) | {less:.2f} % less (target ≥ {tt:g} %: "
        f"{'met' if less >= tt else 'missed'}) |")
out.append("")
out.append("| workload | bytes, (b) vs (a) | checkpoint time, (b) vs (a) |")
out.append("|---|---|---|")
out.extend(summary)

# Recovery: kill the job after a few checkpoints, delete 1 or 2 pools, restart.
out.append("")
out.append("Recovery (restart with 1 or 2 pools deleted; `kioku_group_recover` on the slowest "
           "rank: agreeing, decoding the lost ranks' data and parity from 6 survivors' shards per "
           "stripe, and committing before the program goes on):\n")
out.append("| MiB per rank | lost ranks | recovery time | of which decoding | bytes received by the lost ranks | time per lost MiB |")
out.append("|---|---|---|---|---|---|")
for size in sorted({64, MIB}):
    for lost in [1, 2]:
        d = os.path.join(SHM, f"rec-{size}-{lost}")
        mpirun(["mat", str(size), "2"], {}, d)
        for r in range(lost):
            os.remove(os.path.join(d, f"job.{3 + 2 * r}.pool"))
        rows = mpirun(["mat", str(size), "2"], {}, d)
        shutil.rmtree(d)
        rec = [r for r in rows if "recover_ns" in r][0]
        ns = rec["recover_ns"]
        out.append(f"| {size} | {lost} | {ns / 1e9:.2f} s | {rec['decode_ns'] / 1e9:.2f} s "
                   f"| {mib(rec['received'])} | {ns / 1e6 / (size * lost):.1f} ms |")
print("\n".join(out))
