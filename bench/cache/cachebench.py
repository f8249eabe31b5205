"""Shared pieces of the kioku-cache benchmarks: starting servers, loading items with
memtier_benchmark, reading stats and RSS. Imported by run.py."""
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIOKU = ROOT / "target" / "release" / "kioku-cache"
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=60.0):
    """Seconds until `port` accepts a connection (the server's start-up time)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return time.monotonic() - t0
        except OSError:
            time.sleep(0.002)
    raise RuntimeError(f"port {port} not open after {timeout} s")


class Server:
    """A kioku-cache or memcached process on a free port of 127.0.0.1."""

    def __init__(self, kind, mem_mb, threads, extra=(), port=None, env=None):
        self.kind, self.port = kind, port or free_port()
        prog = [str(KIOKU)] if kind == "kioku" else ["memcached", "-U", "0", "-u", "root"]
        args = prog + ["-l", "127.0.0.1", "-p", str(self.port), "-m", str(mem_mb),
                       "-t", str(threads), "-c", "4096", *extra]
        self.t_exec = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env={**os.environ, **(env or {})})
        self.startup = wait_port(self.port, self.proc)

    def stats(self, what=""):
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(f"stats {what}\r\n".encode())
            buf = b""
            while not buf.endswith(b"END\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        out = {}
        for line in buf.decode().splitlines():
            m = re.match(r"STAT (\S+) (\S+)", line)
            if m:
                out[m.group(1)] = m.group(2)
        return out

    def rss_mb(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def cpu_s(self):
        """CPU time (user + system) the server used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def anon_huge_mb(self):
        total = 0
        for line in Path(f"/proc/{self.proc.pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("AnonHugePages:", "FilePmdMapped:", "ShmemPmdMapped:")):
                total += int(line.split()[1])
        return total / 1024

    def send(self, sig):
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=120)

    def stdout_text(self):
        """What the server printed (after it exited)."""
        return self.proc.stdout.read() if self.proc.stdout else ""


def memtier(port, *args, json_out=None):
    """Run memtier_benchmark against 127.0.0.1:port with the memcached text protocol."""
    exe = os.environ.get("MEMTIER", "/tmp/cache/memtier/memtier_benchmark")
    cmd = [exe, "-s", "127.0.0.1", "-p", str(port), "-P", "memcache_text",
           "--hide-histogram", "--key-prefix=k", *args]
    if json_out:
        cmd.append(f"--json-out-file={json_out}")
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"memtier failed: {r.stderr[-2000:]}")
    return r.stdout


def load(port, items, size):
    """Store keys k1..k<items> with values of `size` bytes (each key once)."""
    memtier(port, "--ratio=1:0", "--key-pattern=P:P", "--key-minimum=1",
            f"--key-maximum={items}", "--requests=allkeys", f"--data-size={size}",
            "-t", "1", "-c", "4", "--pipeline=32")


def set_thp(mode):
    """Set the system-wide THP mode; returns the previous one."""
    old = re.search(r"\[(\w+)\]", THP.read_text()).group(1)
    THP.write_text(mode)
    return old


def loadavg():
    return os.getloadavg()[0]
