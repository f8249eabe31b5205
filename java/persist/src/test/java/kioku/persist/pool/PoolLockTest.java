package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Exclusive use: a second opener gets BUSY naming the holder, whoever and wherever it is. */
class PoolLockTest {
  @TempDir(factory = TestSupport.Durable.class)
  Path dir;

  private Path newPool() throws Exception {
    Path path = dir.resolve("locked.pool");
    Pool.create(path, "kioku.test", MediumChoice.FILE).close();
    return path;
  }

  private static String procLocksLine(Path path, String type, long pid) throws Exception {
    Map<String, Object> a = Files.readAttributes(path, "unix:ino");
    String ino = ":" + a.get("ino") + " ";
    for (String line : Files.readAllLines(Path.of("/proc/locks"))) {
      String[] f = line.trim().split("\\s+");
      if (f.length >= 6 && f[1].equals(type) && f[4].equals(Long.toString(pid))
          && (f[5] + " ").endsWith(ino)) {
        return line;
      }
    }
    return null;
  }

  @Test
  void aSecondOpenInThisJvmIsBusyAndLeavesTheFirstLockAlone() throws Exception {
    Path path = newPool();
    long me = ProcessHandle.current().pid();
    try (Pool first = Pool.open(path, MediumChoice.FILE)) {
      PoolException e = TestSupport.expect(PoolException.Reason.BUSY,
          () -> Pool.open(path, MediumChoice.FILE));
      assertEquals(me, e.holderPid().orElseThrow());
      assertTrue(e.getMessage().contains("process " + me), e.getMessage());
      // Through another name of the same file, too.
      Path link = dir.resolve("link.pool");
      Files.createLink(link, path);
      TestSupport.expect(PoolException.Reason.BUSY, () -> Pool.open(link, MediumChoice.FILE));
      // A failed open must not have opened (and closed) the file: that would drop our lock.
      assertTrue(procLocksLine(path, "POSIX", me) != null, "the first open still holds its lock");
      first.commit(new long[] {1});
    }
    assertEquals(null, procLocksLine(path, "POSIX", me), "close releases the lock");
    try (Pool again = Pool.open(path, MediumChoice.FILE)) {
      assertEquals(1, again.epoch());
    }
  }

  @Test
  void aPoolHeldByAnotherJvmIsBusy() throws Exception {
    Path path = newPool();
    Process child = TestSupport.childJvm(LockHolder.class, path.toString()).start();
    try {
      BufferedReader out = new BufferedReader(
          new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
      String line = out.readLine();
      assertEquals("locked epoch=0", line, "child JVM did not take the pool");
      PoolException e = TestSupport.expect(PoolException.Reason.BUSY,
          () -> Pool.open(path, MediumChoice.FILE));
      assertEquals(child.pid(), e.holderPid().orElseThrow(), e.getMessage());
      assertTrue(e.getMessage().contains("process " + child.pid()), e.getMessage());
      child.getOutputStream().close();
      assertTrue(child.waitFor(30, TimeUnit.SECONDS), "child did not let go");
      assertEquals(0, child.exitValue());
    } finally {
      child.destroyForcibly();
    }
    Pool.open(path, MediumChoice.FILE).close();
  }

  @Test
  void aFlockHeldByAnotherProcessIsBusy() throws Exception {
    Path flock = Path.of("/usr/bin/flock");
    Assumptions.assumeTrue(Files.isExecutable(flock), "SKIPPED: /usr/bin/flock is missing");
    Path path = newPool();
    Process p = new ProcessBuilder(flock.toString(), path.toString(), "sleep", "30").start();
    try {
      // flock(1) takes the lock, then forks sleep (which inherits the locked descriptor): wait
      // for both, so that the clean-up below finds the child to end.
      boolean ready = false;
      for (int i = 0; i < 400 && !ready; i++) {
        ready = procLocksLine(path, "FLOCK", p.pid()) != null && p.descendants().count() > 0;
        if (!ready) {
          Thread.sleep(25);
        }
      }
      assertTrue(ready, "flock(1) did not take its lock and start sleep");
      PoolException e = TestSupport.expect(PoolException.Reason.BUSY,
          () -> Pool.open(path, MediumChoice.FILE));
      assertEquals(p.pid(), e.holderPid().orElseThrow(), e.getMessage());
      assertTrue(e.getMessage().startsWith(path + ": pool is in use by process " + p.pid()),
          e.getMessage());
    } finally {
      // flock(1) runs sleep as its child, which inherits the locked descriptor.
      p.descendants().forEach(ProcessHandle::destroyForcibly);
      p.destroyForcibly();
      p.waitFor(30, TimeUnit.SECONDS);
    }
    // Released with its holder; our own failed attempt left nothing behind.
    for (int i = 0; i < 200 && procLocksLine(path, "FLOCK", p.pid()) != null; i++) {
      Thread.sleep(25);
    }
    Pool.open(path, MediumChoice.FILE).close();
  }

  @Test
  void parsesProcLocks() {
    long dev = 0xfe01; // major 0xfe, minor 0x01
    String text = "1: POSIX  ADVISORY  WRITE 99 fe:01:42 0 EOF\n"
        + "2: -> FLOCK  ADVISORY  WRITE 77 fe:01:42 0 EOF\n"
        + "3: FLOCK  ADVISORY  WRITE 1234 fe:01:42 0 EOF\n";
    assertEquals(1234, PoolLock.findHolder(text, dev, 42, 1, true));
    assertEquals(99, PoolLock.findHolder(text, dev, 42, 1, false));
    assertEquals(-1, PoolLock.findHolder(text, dev, 43, 1, true));
    assertEquals(-1, PoolLock.findHolder(text, dev, 42, 1234, true));
    assertEquals(-1, PoolLock.findHolder(text, 0x1b, 42, 1, false), "other device");
    assertEquals(5, PoolLock.findHolder("1: FLOCK  ADVISORY  WRITE 5 00:1b:42 0 EOF", 0x1b, 42,
        1, true));
  }
}
