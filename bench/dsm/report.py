#!/usr/bin/env python3
"""Turns bench/dsm/run.sh's raw lines into the Markdown body and a plot of Laplace times."""
import re
import sys
from collections import defaultdict

raw, plot = sys.argv[1], sys.argv[2]
lap = defaultdict(lambda: {"dsm": [], "mpi": []})
micro, ckpt, xfer, recovery = {}, [], {}, []
for line in open(raw):
    line = line.strip()
    if line.startswith("laplace "):
        f = dict(kv.split("=") for kv in line.split()[1:])
        key = (int(f["n"]), int(f["iters"]), int(f["nodes"]))
        lap[key]["dsm"].append(float(f["dsm"]))
        lap[key]["mpi"].append(float(f["mpi"]))
    elif line.startswith("CKPT "):
        f = dict(kv.split("=") for kv in line.split()[1:])
        ckpt.append((int(f["mib"]), float(f["s"]), float(f.get("first_s", "nan"))))
    elif line.startswith("XFER "):
        f = dict(kv.split("=") for kv in line.split()[1:])
        xfer[int(f["mib"])] = float(f["s"])
    elif line.startswith("RECOVERY "):
        f = dict(kv.split("=") for kv in line.split()[1:])
        recovery.append((int(f["n"]), int(f["image_mib"]), float(f["s"])))
    elif "=" in line:
        k, v = line.split("=", 1)
        micro[k] = float(v)

out = ["### Laplace (Jacobi): DSM against MPI", "",
       "| grid | sweeps | nodes | DSM (s) | MPI (s) | DSM / MPI |", "|---|---|---|---|---|---|"]
for (n, iters, nodes), t in sorted(lap.items()):
    d, m = min(t["dsm"]), min(t["mpi"])
    out.append(f"| {n}² | {iters} | {nodes} | {d:.3f} | {m:.3f} | {d / m:.2f}× |")
out += ["", "### Latencies (2 nodes)", "",
        "| what | kioku-dsm | seed (SCASH over XMCAPI, TCP) |", "|---|---|---|",
        f"| barrier | {micro.get('BARRIER_US', float('nan')):.1f} µs | (24 B message: 83.3 µs) |",
        f"| 4 KiB page fetch on access (median; p99) | {micro.get('FETCH_US', float('nan')):.1f} µs; "
        f"{micro.get('FETCH_P99_US', float('nan')):.1f} µs | 237.2 µs (transfer only) |",
        "", "### Checkpoint time against image size (2 nodes)", "",
        "Steady state: the median of the 3rd to 5th checkpoint of a size (the two contexts' memory",
        "already there, as in a run that checkpoints every few barriers); the first one also faults",
        "in and zeroes the memory of a context at the node and at its buddy.", "",
        "| home pages per node | checkpoint (s) | MiB/s per node | first checkpoint (s) | MPI send to the neighbour (s) | checkpoint / MPI |",
        "|---|---|---|---|---|---|"]
for mib, s, first in ckpt:
    x = xfer.get(mib)
    xs = f"{x:.4f}" if x else "–"
    r = f"{s / x:.2f}×" if x else "–"
    out.append(f"| {mib} MiB | {s:.4f} | {mib / s:.0f} | {first:.4f} | {xs} | {r} |")
out += ["", "### Recovery (4 nodes and a standby; node 2 SIGKILLed mid-run)", "",
        "| grid | image per node | recovery, as the survivors saw it (s) |", "|---|---|---|"]
for n, mib, s in recovery:
    out.append(f"| {n}² | {mib} MiB | {s:.3f} |")
print("\n".join(out))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in sorted({k[0] for k in lap}):
        keys = sorted(k for k in lap if k[0] == n)
        xs = [k[2] for k in keys]
        ax.plot(xs, [min(lap[k]["dsm"]) for k in keys], "o-", label=f"DSM {n}²")
        ax.plot(xs, [min(lap[k]["mpi"]) for k in keys], "s--", label=f"MPI {n}²")
    ax.set_xlabel("node processes (2 cores)")
    ax.set_ylabel("sweep time (s)")
    ax.set_yscale("log")
    ax.set_xticks(sorted({k[2] for k in lap}))
    ax.legend()
    ax.set_title("Laplace: kioku-dsm against Open MPI")
    fig.tight_layout()
    fig.savefig(plot, dpi=100)
except ImportError:
    print("\n(matplotlib is missing: no plot)", file=sys.stderr)
