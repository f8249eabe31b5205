#!/usr/bin/env python3
"""kioku-cache benchmarks against Debian's memcached, with memtier_benchmark as the client.

  run.py restart  [--items N] [--size B]    warm restart: kioku after SIGKILL vs memcached -e
                                            (clean shutdown) vs memcached after SIGKILL vs cold
  run.py load     [--secs S]                YCSB C (zipf 0.99, read only) and 95/5 read/update:
                                            throughput, p50/p99, RSS over time; memcached
                                            THP madvise (default) / always / -L vs kioku-cache
  run.py report                             docs/perf.md section "cache" and the plot

Results go to target/bench-cache/*.json. memtier_benchmark is not packaged by Debian 12: build
it from its sources outside the repository and give its path in MEMTIER (default
/tmp/cache/memtier/memtier_benchmark). `load` switches the system-wide THP mode for the
"THP always" runs and restores it afterwards.
"""
import argparse
import json
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cachebench as cb  # noqa: E402

OUT = cb.ROOT / "target" / "bench-cache"


def wait_stat(srv, name, pred, timeout=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = int(srv.stats().get(name, "0"))
        if pred(v):
            return v
        time.sleep(0.05)
    raise RuntimeError(f"stat {name} did not reach the expected value")


def kioku_restart(pool, items, size, mem, rounds):
    srv = cb.Server("kioku", mem, 2, ["--pool", str(pool), "--checkpoint-interval", "0"])
    cb.load(srv.port, items, size)
    assert int(srv.stats()["curr_items"]) == items
    srv.send(signal.SIGUSR1)
    wait_stat(srv, "checkpoint_epoch", lambda v: v >= 1)
    first_ckpt_ms = int(srv.stats()["checkpoint_last_us"]) / 1000
    port = srv.port
    runs = []
    # The last round restarts with the pool evicted from the page cache first, as after a
    # reboot or a power cut (on tmpfs there is nothing to evict: that round is like the others).
    for r in range(rounds + 1):
        cold = r == rounds
        srv.stop(signal.SIGKILL)
        if cold:
            fd = os.open(pool, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        la = cb.loadavg()
        srv = cb.Server("kioku", mem, 2, ["--pool", str(pool), "--checkpoint-interval", "0"],
                        port=port)
        line = srv.proc.stdout.readline().strip()
        cpu = srv.cpu_s()
        st = srv.stats()
        # A checkpoint right after the restart: how much did the restore leave dirty?
        srv.send(signal.SIGUSR1)
        epoch = wait_stat(srv, "checkpoint_epoch", lambda v: v >= 2 + r)
        runs.append({
            "round": r + 1,
            "cold": cold,
            "startup_s": srv.startup,
            "cpu_s": cpu,
            "restored_items": int(st["restored_items"]),
            "restore_us": int(st["restore_us"]),
            "curr_items": int(st["curr_items"]),
            "line": line,
            "next_checkpoint_ms": int(srv.stats()["checkpoint_last_us"]) / 1000,
            "epoch": epoch,
            "loadavg": la,
        })
        print("kioku warm restart", runs[-1], flush=True)
    rss = srv.rss_mb()
    srv.stop(signal.SIGKILL)
    return {"first_checkpoint_ms": first_ckpt_ms, "runs": runs, "rss_mb": rss}


# memcached 1.6.18 (Debian 12) refuses to restart from its -e file in the second it stopped
# (its restart metadata check wants the wall clock to have moved: "restart incompatible due to
# setting for [stop_time]"); the bench waits that second out before restarting it.
STOP_TO_START = 1.1


def memcached_restart(memfile, items, size, mem):
    out = {}
    mc = lambda port=None: cb.Server("memcached", mem, 2, ["-e", str(memfile)], port=port)
    srv = mc()
    cb.load(srv.port, items, size)
    assert int(srv.stats()["curr_items"]) == items
    port = srv.port
    # memcached 1.6: SIGUSR1 with -e saves the metadata and exits.
    t0 = time.monotonic()
    srv.stop(signal.SIGUSR1)
    out["clean_shutdown_s"] = time.monotonic() - t0
    time.sleep(STOP_TO_START)
    la = cb.loadavg()
    srv = mc(port)
    out["clean"] = {"startup_s": srv.startup, "cpu_s": srv.cpu_s(),
                    "curr_items": int(srv.stats()["curr_items"]), "loadavg": la}
    print("memcached -e after a clean shutdown", out["clean"], flush=True)
    srv.stop(signal.SIGKILL)
    time.sleep(STOP_TO_START)
    la = cb.loadavg()
    srv = mc(port)
    out["sigkill"] = {"startup_s": srv.startup, "cpu_s": srv.cpu_s(),
                      "curr_items": int(srv.stats()["curr_items"]), "loadavg": la}
    print("memcached -e after SIGKILL", out["sigkill"], flush=True)
    # Cold: what an empty cache costs to fill again (here from a client that has every value;
    # a real one refills from the database, slower).
    t0 = time.monotonic()
    cb.load(srv.port, items, size)
    out["cold_refill_s"] = time.monotonic() - t0
    print("cold refill", out["cold_refill_s"], flush=True)
    srv.stop(signal.SIGKILL)
    return out


def command():
    """This run's command line, for the report."""
    return "python3 bench/cache/run.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])


def cmd_restart(a):
    OUT.mkdir(parents=True, exist_ok=True)
    scratch = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="kioku-cache-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    pool = scratch / "cache.pool"
    pool.unlink(missing_ok=True)
    memfile = Path("/dev/shm") / f"kioku-bench-memcached-{time.time_ns()}"
    try:
        res = {
            "command": command(),
            "items": a.items, "size": a.size, "mem_mb": a.mem,
            "kioku": kioku_restart(pool, a.items, a.size, a.mem, a.rounds),
            "memcached": memcached_restart(memfile, a.items, a.size, a.mem),
        }
    finally:
        pool.unlink(missing_ok=True)
        memfile.unlink(missing_ok=True)
        Path(f"{memfile}.meta").unlink(missing_ok=True)
    (OUT / "restart.json").write_text(json.dumps(res, indent=1))


CONFIGS = {
    "memcached (THP madvise)": ("memcached", [], "madvise"),
    "memcached (THP always)": ("memcached", [], "always"),
    "memcached -L": ("memcached", ["-L"], "madvise"),
    "kioku-cache": ("kioku", [], "madvise"),
    "kioku-cache --hot-mb 64": ("kioku", ["--hot-mb", "64"], "madvise"),
}

WORKLOADS = {
    "C": "--ratio=0:1",
    "95/5": "--ratio=1:19",
}


def sample_rss(srv, stop, samples, t0):
    while not stop.is_set():
        try:
            samples.append((time.monotonic() - t0, srv.rss_mb(), srv.anon_huge_mb()))
        except OSError:
            return
        stop.wait(0.5)


def one_load(name, kind, extra, thp, a):
    old = cb.set_thp(thp)
    try:
        srv = cb.Server(kind, a.mem, a.threads, extra)
        samples, stop = [], threading.Event()
        t0 = time.monotonic()
        sampler = threading.Thread(target=sample_rss, args=(srv, stop, samples, t0))
        sampler.start()
        try:
            cb.load(srv.port, a.items, a.size)
            loaded_rss = srv.rss_mb()
            res = {"config": name, "loaded_rss_mb": loaded_rss, "workloads": {}}
            for wl, ratio in WORKLOADS.items():
                js = OUT / "memtier.json"
                la = cb.loadavg()
                cpu0 = srv.cpu_s()
                cb.memtier(srv.port, ratio, "--key-pattern=Z:Z", "--key-zipf-exp=0.99",
                           "--key-minimum=1", f"--key-maximum={a.items}",
                           f"--data-size={a.size}", f"--test-time={a.secs}",
                           "-t", str(a.client_threads),
                           "-c", str(a.clients), "--pipeline=1", "--distinct-client-seed",
                           json_out=js)
                cpu = srv.cpu_s() - cpu0
                tot = json.loads(js.read_text())["ALL STATS"]["Totals"]
                pct = tot.get("Percentile Latencies", {})
                res["workloads"][wl] = {
                    "ops": tot["Ops/sec"],
                    "p50_ms": pct.get("p50.00"),
                    "p99_ms": pct.get("p99.00"),
                    "hits": tot.get("Hits/sec"),
                    "misses": tot.get("Misses/sec"),
                    # Server CPU per request: what the server spends, whoever else runs.
                    "cpu_us_per_op": 1e6 * cpu / max(1.0, tot["Ops/sec"] * a.secs),
                    "loadavg": la,
                }
                print(name, wl, res["workloads"][wl], flush=True)
            res["end_rss_mb"] = srv.rss_mb()
            res["huge_mb"] = srv.anon_huge_mb()
            res["stats"] = {k: v for k, v in srv.stats().items()
                            if k.startswith(("hot_", "huge_"))}
        finally:
            stop.set()
            sampler.join()
            srv.stop()
        res["rss_samples"] = samples
        return res
    finally:
        cb.set_thp(old)


def cmd_load(a):
    OUT.mkdir(parents=True, exist_ok=True)
    results = []
    names = [n.strip() for n in a.configs.split(",")] if a.configs else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configurations {unknown}; known: {list(CONFIGS)}")
    order = names * a.repeat
    for name in order:
        kind, extra, thp = CONFIGS[name]
        results.append(one_load(name, kind, extra, thp, a))
    (OUT / "load.json").write_text(json.dumps(
        {"command": command(),
         "items": a.items, "size": a.size, "mem_mb": a.mem, "threads": a.threads,
         "clients": a.clients, "client_threads": a.client_threads, "secs": a.secs,
         "runs": results}, indent=1))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("restart")
    r.add_argument("--items", type=int, default=800_000)
    r.add_argument("--size", type=int, default=512)
    r.add_argument("--mem", type=int, default=1024)
    r.add_argument("--rounds", type=int, default=2)
    r.add_argument("--dir", help="where the pool goes (default: a new temporary directory)")
    r.set_defaults(func=cmd_restart)
    ld = sub.add_parser("load")
    ld.add_argument("--items", type=int, default=800_000)
    ld.add_argument("--size", type=int, default=512)
    ld.add_argument("--mem", type=int, default=1024)
    ld.add_argument("--threads", type=int, default=2)
    ld.add_argument("--clients", type=int, default=8)
    ld.add_argument("--secs", type=int, default=10)
    ld.add_argument("--repeat", type=int, default=3)
    ld.add_argument("--client-threads", type=int, default=2,
                    help="memtier threads (each with --clients connections)")
    ld.add_argument("--configs", help="comma-separated subset of the configurations")
    ld.set_defaults(func=cmd_load)
    rp = sub.add_parser("report")
    rp.set_defaults(func=lambda a: __import__("report").main())
    a = p.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()
