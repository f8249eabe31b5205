"""pool_map — Python's multiprocessing.Pool as an ordinary program for kioku's process tests.

Usage: python3 pool_map.py BATCHES ITEMS WORK

A pool of two worker processes (the default start method on Linux: fork) maps a deterministic
function over BATCHES batches of ITEMS numbers; each result is a chain of WORK SHA-256 rounds.
The parent prints one line per batch, in order, with a digest of the batch's results, and a
last line with the digest of everything: the same bytes on every run.
"""

import hashlib
import multiprocessing
import sys


def chain(item):
    work = chain.work
    h = hashlib.sha256(item.to_bytes(8, "little")).digest()
    for _ in range(work):
        h = hashlib.sha256(h).digest()
    return item, h.hex()[:16]


def init(work):
    chain.work = work


def main():
    batches, items, work = (int(a) for a in sys.argv[1:4])
    total = hashlib.sha256()
    with multiprocessing.Pool(2, initializer=init, initargs=(work,)) as pool:
        for b in range(batches):
            results = pool.map(chain, range(b * items, (b + 1) * items), chunksize=4)
            digest = hashlib.sha256()
            for item, h in results:
                if item < b * items or item >= (b + 1) * items:
                    sys.exit(f"pool_map: result for item {item} in batch {b}")
                digest.update(h.encode())
            total.update(digest.digest())
            print(f"batch {b}: {digest.hexdigest()[:32]}", flush=True)
    print(f"done: {batches} batches of {items}, {total.hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
