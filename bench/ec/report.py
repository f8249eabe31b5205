#!/usr/bin/env python3
"""Turns the raw lines of ec_c_bench and ec_bench into the docs/perf.md `ec` section.

Input lines (any number of runs, mixed): codec op k m size best_GBps median_GBps
Usage: report.py RESULTS_FILE COMMAND_LINE MACHINE_LINE > body.md
Across repeated lines of one (codec, op, k, m, size) the best of the bests and the median of
the medians are kept.
"""
import statistics
import sys
from collections import defaultdict

ENC_TARGET_ISAL, TARGET_JER = 0.95, 2.0

rows = defaultdict(lambda: ([], []))
points = []
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 7:
        continue
    codec, op, k, m, size = f[0], f[1], int(f[2]), int(f[3]), int(f[4])
    best, med = float(f[5]), float(f[6])
    rows[(codec, op, k, m, size)][0].append(best)
    rows[(codec, op, k, m, size)][1].append(med)
    if (k, m, size) not in points:
        points.append((k, m, size))


def get(codec, op, p, which=0):
    v = rows.get((codec, op) + p)
    if not v or not v[0]:
        return None
    return max(v[0]) if which == 0 else statistics.median(v[1])


def fmt(x, nd=2):
    return "–" if x is None else f"{x:.{nd}f}"


def size_s(s):
    return f"{s // 1048576} MiB" if s >= 1048576 else f"{s // 1024} KiB"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def verdict(r, target):
    if r is None:
        return "–"
    return f"{r:.2f} {'PASS' if r >= target else 'FAIL'}"


JER = ["jerasure_cauchy_good", "jerasure_reed_sol_van", "jerasure_cauchy_good_bitmatrix"]
points.sort()
out = []
w = out.append
w(f"Command: `{sys.argv[2]}`  ")
w(f"Machine: {sys.argv[3]}  ")
w("One core (`taskset`), GB/s of data bytes (k × shard size, 1 GB = 10^9 B) per operation; "
  "each figure is the best of all repetitions (runs interleaved so that load from other "
  "processes on this shared 2-core machine spreads over every codec); ratios in the "
  "`best` columns use those bests, `median` columns the medians of the same runs. "
  "`read` is a plain AVX2 read of the same data buffers in the same run, the physical "
  "limit; `(x)` after a codec is its fraction of that read. kioku = `Codec::new` "
  "(engine chosen at run time: kioku's AVX2 kernels here), kioku-isal = the same API on "
  "the ISA-L engine, ISA-L = ISA-L 2.30 called directly from C, Jerasure = Jerasure 2 "
  "(w = 8) via gf-complete, best of cauchy_good, reed_sol_van and the cauchy_good bitmatrix "
  "schedule (the latter only for k + m ≤ 64), rs-simd = reed-solomon-simd 3 (FFT, its own "
  "code). Targets: kioku ≥ 0.95 × ISA-L, ≥ 2 × Jerasure.")
w("")
w("### Encode")
w("")
w("| k+m | shard | read | kioku (x read) | kioku-isal | ISA-L C (x read) | Jerasure best (which) | rs-simd "
  "| kioku/ISA-L best | kioku/ISA-L median | kioku/Jerasure best |")
w("|---|---|---|---|---|---|---|---|---|---|---|")
summary = {"enc_isal": [], "enc_jer": [], "dec_isal": [], "dec_jer": [], "deccold_isal": []}
for p in points:
    k, m, s = p
    rd = get("memread", "read", p)
    kk = get("kioku", "encode", p)
    ki = get("kioku_isal", "encode", p)
    ic = get("isal", "encode", p)
    jer = [(get(j, "encode", p), j) for j in JER if get(j, "encode", p) is not None]
    jb = max(jer) if jer else (None, "")
    rs = get("rs_simd", "encode", p)
    r_i, r_j = ratio(kk, ic), ratio(kk, jb[0])
    r_im = ratio(get("kioku", "encode", p, 1), get("isal", "encode", p, 1))
    summary["enc_isal"].append(r_i)
    summary["enc_jer"].append(r_j)
    w(f"| {k}+{m} | {size_s(s)} | {fmt(rd, 1)} | {fmt(kk)} ({fmt(ratio(kk, rd))}) | {fmt(ki)} "
      f"| {fmt(ic)} ({fmt(ratio(ic, rd))}) | {fmt(jb[0])} ({jb[1].replace('jerasure_', '')}) | {fmt(rs)} "
      f"| {verdict(r_i, ENC_TARGET_ISAL)} | {verdict(r_im, ENC_TARGET_ISAL)} | {verdict(r_j, TARGET_JER)} |")
w("")
w("### Decode (data shards 0..m-1 lost, rebuilt from the rest and the m parity shards)")
w("")
w("Two like-for-like pairs: *per call* builds the decode matrix and tables on every call "
  "(ISA-L as its own `erasure_code_perf` does: invert the k×k survivor matrix, "
  "`ec_init_tables`, `ec_encode_data`; kioku with its plan cache off: inverts only the "
  "lost×lost Cauchy submatrix); *reused* keeps them across calls (ISA-L tables kept; "
  "kioku's per-erasure-pattern cache, the default).")
w("")
w("| k+m | shard | read | kioku reused (x read) | ISA-L reused | kioku per call | ISA-L per call | Jerasure best | rs-simd "
  "| kioku/ISA-L reused | kioku/ISA-L per call | kioku/ISA-L reused median | kioku/Jerasure |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for p in points:
    k, m, s = p
    rd = get("memread", "read", p)
    kd = get("kioku", "decode", p)
    kc = get("kioku", "decode_nocache", p)
    ir = get("isal", "decode_tables_reused", p)
    ip = get("isal", "decode", p)
    jer = [(get(j, "decode", p), j) for j in JER if get(j, "decode", p) is not None]
    jb = max(jer) if jer else (None, "")
    rs = get("rs_simd", "decode", p)
    r_r, r_p, r_j = ratio(kd, ir), ratio(kc, ip), ratio(kd, jb[0])
    r_rm = ratio(get("kioku", "decode", p, 1), get("isal", "decode_tables_reused", p, 1))
    summary["dec_isal"].append(r_r)
    summary["deccold_isal"].append(r_p)
    summary["dec_jer"].append(r_j)
    w(f"| {k}+{m} | {size_s(s)} | {fmt(rd, 1)} | {fmt(kd)} ({fmt(ratio(kd, rd))}) | {fmt(ir)} | {fmt(kc)} | {fmt(ip)} "
      f"| {fmt(jb[0])} | {fmt(rs)} | {verdict(r_r, ENC_TARGET_ISAL)} | {verdict(r_p, ENC_TARGET_ISAL)} "
      f"| {verdict(r_rm, ENC_TARGET_ISAL)} | {verdict(r_j, TARGET_JER)} |")
w("")
w("### Delta update vs re-encoding the stripe")
w("")
w("`Codec::update(i, offset, old, new, parity)` after p % of one data shard changed, "
  "against `Codec::encode` of the whole stripe: time per parity refresh (µs) and speed-up.")
w("")
w("| k+m | shard | re-encode µs | 1 % µs (×) | 10 % µs (×) | 100 % µs (×) |")
w("|---|---|---|---|---|---|")
for p in points:
    k, m, s = p
    enc = get("kioku", "encode", p)
    if enc is None or get("kioku", "update_1pct", p) is None:
        continue
    t_enc = k * s / (enc * 1e9) * 1e6
    cells = []
    for pct in (1, 10, 100):
        u = get("kioku", f"update_{pct}pct", p)
        t = k * s / (u * 1e9) * 1e6
        cells.append(f"{t:.1f} ({t_enc / t:.1f}×)")
    w(f"| {k}+{m} | {size_s(s)} | {t_enc:.1f} | " + " | ".join(cells) + " |")
w("")


def count(v, t):
    v = [x for x in v if x is not None]
    return f"{sum(x >= t for x in v)}/{len(v)}"


w("### Verdict")
w("")
w(f"- encode, kioku ≥ 0.95 × ISA-L: {count(summary['enc_isal'], ENC_TARGET_ISAL)} points pass")
w(f"- decode (reused tables), kioku ≥ 0.95 × ISA-L: {count(summary['dec_isal'], ENC_TARGET_ISAL)} pass; "
  f"per call: {count(summary['deccold_isal'], ENC_TARGET_ISAL)} pass")
w(f"- encode, kioku ≥ 2 × best Jerasure: {count(summary['enc_jer'], TARGET_JER)} pass; "
  f"decode: {count(summary['dec_jer'], TARGET_JER)} pass")
print("\n".join(out))
