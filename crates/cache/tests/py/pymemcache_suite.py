"""pymemcache (a client nobody here wrote) against a kioku-cache: every command round-trips,
including cas conflicts, expiry, values up to -I, and eviction under -m.

Usage: pymemcache_suite.py HOST PORT ITEM_SIZE_MAX MEMORY_LIMIT_BYTES
"""
import sys
import threading
import time

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError

host, port, item_max, mem_limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# TCP_NODELAY, as pymemcache advises for latency: with Nagle's algorithm each request sent
# while the last is unacknowledged waits for the peer's delayed ACK (40 ms; the 4,800 requests
# of many_clients_same_keys took 9.6 s against the real memcached, 0.4 s with it).
c = Client((host, port), connect_timeout=10, timeout=20, default_noreply=False, no_delay=True)
failures = []


def check(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")


def case(fn):
    c.flush_all()
    try:
        fn()
    except Exception as e:  # a client exception is a failure of the case, not of the suite
        failures.append(f"{fn.__name__}: {type(e).__name__}: {e}")
    return fn


@case
def storage_commands():
    check("set", c.set("a", b"1", expire=0) is True)
    check("get", c.get("a") == b"1", c.get("a"))
    check("add existing", c.add("a", b"2") is False)
    check("add new", c.add("b", b"2") is True)
    check("replace", c.replace("a", b"3") is True and c.get("a") == b"3")
    check("replace missing", c.replace("zz", b"3") is False)
    check("append", c.append("a", b"4") is True and c.get("a") == b"34")
    check("prepend", c.prepend("a", b"2") is True and c.get("a") == b"234")
    check("append missing", c.append("nope", b"x") is False)
    check("get_many", c.get_many(["a", "b", "nope"]) == {"a": b"234", "b": b"2"})
    check("set_many", c.set_many({"m1": b"x", "m2": b"y"}) == [] and c.get("m2") == b"y")
    check("delete", c.delete("a") is True and c.get("a") is None)
    check("delete missing", c.delete("a") is False)
    check("delete_many", c.delete_many(["m1", "m2"]) is True and c.get("m1") is None)
    check("noreply set", c.set("nr", b"v", noreply=True) is True and c.get("nr") == b"v")


@case
def flags_round_trip():
    from pymemcache.client.base import Client as C2
    raw = C2((host, port))
    raw.set("f", b"x")
    # pymemcache stores client flags; read them back with gets-like raw access.
    res = raw.raw_command(b"get f", end_tokens=b"END\r\n")
    check("flags", res.startswith(b"VALUE f 0 1"), res)
    raw.raw_command(b"set f 4294967295 0 1\r\nx", end_tokens=b"\r\n")
    res = raw.raw_command(b"get f", end_tokens=b"END\r\n")
    check("32-bit flags", res.startswith(b"VALUE f 4294967295 1"), res)


@case
def cas_and_conflicts():
    c.set("k", b"v1")
    v, token = c.gets("k")
    check("gets", v == b"v1" and token is not None)
    check("cas ok", c.cas("k", b"v2", token) is True)
    check("cas conflict", c.cas("k", b"v3", token) is False, "stale token must fail")
    check("value after conflict", c.get("k") == b"v2")
    check("cas missing", c.cas("missing", b"x", b"1") is None)
    _, t2 = c.gets("k")
    check("cas changes", t2 != token)


@case
def counters():
    c.set("n", b"10")
    check("incr", c.incr("n", 5) == 15)
    check("decr", c.decr("n", 20) == 0)
    check("incr missing", c.incr("missing", 1) is None)
    check("incr wraps", (c.set("w", b"18446744073709551615") and c.incr("w", 2)) == 1)
    c.set("t", b"text")
    try:
        c.incr("t", 1)
        check("incr non-numeric", False, "no error")
    except MemcacheClientError as e:
        check("incr non-numeric", b"non-numeric" in str(e).encode(), e)


@case
def expiry_and_touch():
    # Every expiry this case checks is set up first and waited out by one sleep (memcached
    # counts expiry in whole seconds): "e", and "h" (made to expire in 1 s by gat) expire;
    # "keep", and "t" and "g" (set to expire in 1 s, then made to last by touch and by
    # gat/gats 0) must not.
    c.set("e", b"x", expire=1)
    c.set("keep", b"y", expire=100)
    check("live", c.get("e") == b"x")
    c.set("t", b"z", expire=1)
    check("touch", c.touch("t", expire=100) is True)
    check("touch missing", c.touch("missing", 10) is False)
    c.set("g", b"z", expire=1)
    # pymemcache has no gat/gats: send them raw (raw_command strips the END line).
    res = c.raw_command(b"gat 1 g", end_tokens=b"END\r\n")
    check("gat", res == b"VALUE g 0 1\r\nz\r\n", res)
    res = c.raw_command(b"gats 0 g", end_tokens=b"END\r\n")
    check("gats", res.startswith(b"VALUE g 0 1 ") and res.endswith(b"\r\nz\r\n"), res)
    c.set("h", b"w", expire=100)
    res = c.raw_command(b"gat 1 h", end_tokens=b"END\r\n")
    check("gat shortens", res == b"VALUE h 0 1\r\nw\r\n", res)
    time.sleep(2.2)
    check("expired", c.get("e") is None)
    check("not expired", c.get("keep") == b"y")
    check("touched stays", c.get("t") == b"z")
    check("gat 0 keeps it forever", c.get("g") == b"z")
    check("gat 1 expires it", c.get("h") is None)
    check("absolute expiry", c.set("abs", b"a", expire=int(time.time()) + 100) and c.get("abs") == b"a")
    c.set("past", b"p", expire=int(time.time()) - 10)
    check("absolute past", c.get("past") is None)


@case
def flush_with_delay():
    c.set("f", b"x")
    c.flush_all(delay=1)
    check("before delay", c.get("f") == b"x")
    time.sleep(2.2)
    check("after delay", c.get("f") is None)


@case
def large_values_up_to_item_max():
    for size in (0, 1, 100, 4096, 100_000, item_max - 1, item_max):
        v = bytes((i * 7 + size) % 251 for i in range(size))
        ok = c.set(f"big{size}", v)
        got = c.get(f"big{size}")
        check(f"size {size}", ok is True and got == v, f"ok={ok} len={len(got or b'')}")
    try:
        c.set("toobig", b"x" * (item_max + 1))
        check("over -I", False, "accepted")
    except MemcacheServerError as e:
        check("over -I", "too large" in str(e), e)
    check("still serving", c.get("big100") is not None)


@case
def eviction_under_memory_limit():
    value = b"e" * 10_000
    n = mem_limit // len(value) * 2
    for i in range(n):
        check(f"store {i}", c.set(f"ev{i}", value) is True)
    stats = c.stats()
    check("evictions", int(stats[b"evictions"]) > 0, stats.get(b"evictions"))
    check("bytes within -m", int(stats[b"bytes"]) <= mem_limit, stats[b"bytes"])
    check("newest kept", c.get(f"ev{n - 1}") == value)
    check("oldest evicted", c.get("ev0") is None)


@case
def stats_version_and_meta():
    check("version", c.version().startswith(b"1.6") if isinstance(c.version(), bytes) else c.version().startswith("1.6"))
    s = c.stats()
    for k in (b"pid", b"uptime", b"curr_items", b"get_hits", b"limit_maxbytes", b"threads"):
        check(f"stats {k}", k in s)
    check("stats slabs", isinstance(c.stats("slabs"), dict))
    check("stats items", isinstance(c.stats("items"), dict))
    check("stats settings", c.stats("settings").get(b"maxbytes") is not None)
    c.set("meta", b"hello")
    res = c.raw_command(b"mg meta v f t", end_tokens=b"\r\n")
    check("mg", res.startswith(b"VA 5 f0 t-1"), res)
    res = c.raw_command(b"mn", end_tokens=b"\r\n")
    check("mn", res.strip() == b"MN", res)


@case
def many_clients_same_keys():
    errors = []

    def worker(t):
        cl = Client((host, port), timeout=20, no_delay=True)
        for i in range(200):
            v = bytes([65 + (t + i) % 26]) * (50 + (i * 37) % 3000)
            cl.set("shared", v)
            got = cl.get("shared")
            if got is not None and got != got[:1] * len(got):
                errors.append("torn")
            cl.incr("ctr", 1)

    c.set("ctr", b"0")
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check("no torn values", not errors, errors[:3])
    check("counter exact", c.get("ctr") == b"1600", c.get("ctr"))


if failures:
    print("\n".join(failures))
    sys.exit(1)
print("pymemcache suite: all cases passed")
