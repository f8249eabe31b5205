#!/usr/bin/env python3
"""Full checkpoints to disk, narrowly: a program holding MIB MiB rewrites all of it between
checkpoints (bench/run/stall.c) with its pool on a disk file system; kioku (this tree, and
BASE_KIOKU when given) against CRIU's full dump, interleaved round by round. Prints one line
per round and the medians (kioku's reported stop, median of its checkpoints after the first,
which is taken 5 ms in while the program is small; what the
program lost per checkpoint; CRIU's dump time and loss). The full grid is bench/run/capture.sh.

Env: BENCH_BIN (holds `stall`), BENCH_DISK (a directory on the disk), CRIU (path; skipped when
unset), BASE_KIOKU (another kioku to compare; optional), ROUNDS (3), STALL_MIB (512),
STALL_SECS (12), STALL_INTERVAL (0.5).
"""
import os
import statistics
import sys

os.environ.setdefault("BENCH_SHM", "/dev/shm")
os.environ.setdefault("STALL_SECS", "12")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import capture as cap  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
BASE = os.environ.get("BASE_KIOKU") or None


def main():
    this = cap.KIOKU
    cols = {"noise": [], "kioku reported": [], "kioku lost": [], "base reported": [], "base lost": [],
            "CRIU dump": [], "CRIU lost": []}
    for r in range(ROUNDS):
        base, plain_longest = cap.plain_stall(100)
        tools = [("kioku", this)] + ([("base", BASE)] if BASE else [])
        for name, binary in tools:
            cap.KIOKU = binary
            _, longest, s = cap.kioku_stall(100, cap.DISK, {})
            k = max(1, s["checkpoints"] - 2)
            # Every checkpoint after the first (taken 5 ms in, nearly empty) copies it all.
            full = s["stop_ms"][1:] or [float("nan")]
            cols[f"{name} reported"].append(statistics.median(full))
            cols[f"{name} lost"].append(cap.lost_ms(longest, k, base))
            cap.log(f"round {r}: {name}: {s['checkpoints']} checkpoints, stops {[round(x) for x in s['stop_ms']]} ms, "
                    f"durable {[round(x) for x in s['durable_ms']]} ms, sync {[round(x) for x in s['sync_ms']]} ms")
            if name == "kioku":
                cols["noise"].append(cap.lost_ms(plain_longest, k, base))
        if cap.CRIU:
            t, lg, n = cap.criu_stall(100, cap.DISK)
            cols["CRIU dump"].append(t)
            cols["CRIU lost"].append(cap.lost_ms(lg, n, base) if n else float("nan"))
            cap.log(f"round {r}: CRIU: {n} dumps, median {t:.0f} ms")
    names = [c for c, v in cols.items() if v]
    print("| " + " | ".join(f"{c} ms" for c in names) + " |")
    print("|" + "---|" * len(names))
    print("| " + " | ".join(f"{statistics.median(cols[c]):.0f}" for c in names) + " |")
    for c in names:
        cap.log(f"{c}: " + ", ".join(f"{x:.0f}" for x in cols[c]))


if __name__ == "__main__":
    main()
