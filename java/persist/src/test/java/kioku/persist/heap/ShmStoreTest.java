package kioku.persist.heap;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;
import kioku.persist.pool.MediumChoice;
import kioku.persist.pool.Pool;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Durable stores on shm take the path through the replica's native address, with no drain
 * between the word and its checks (order is all tmpfs needs): the replica and its check words
 * must come out exactly as written, including from two threads storing into one replica at
 * once (the stripe lock keeps the checks exact). A reopened heap that had to repair anything,
 * or opens with other values, fails.
 */
class ShmStoreTest {
  private Path dir;

  @BeforeEach
  void shmDirectory() throws Exception {
    Path shm = Path.of("/dev/shm");
    assumeTrue(Files.isDirectory(shm) && Files.isWritable(shm),
        "SKIPPED: /dev/shm (tmpfs) is missing or not writable: the shm medium cannot be tested");
    dir = Files.createTempDirectory(shm, "kioku-shmstore-");
  }

  @AfterEach
  void cleanUp() throws Exception {
    if (dir == null) return;
    try (Stream<Path> s = Files.walk(dir)) {
      s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  private static long[] longs(int n) {
    long[] a = new long[n];
    for (int i = 0; i < n; i++) a[i] = (i + 1) * 0x9E3779B97F4A7C15L;
    return a;
  }

  @Test
  void storesOnShmLeaveExactReplicasAndChecks() throws Exception {
    Path file = dir.resolve("pool");
    int n = 5000;
    long[] a = longs(n);
    PersistentHeap h = PersistentHeap.create(Pool.create(file, PersistentHeap.POOL_KIND, MediumChoice.SHM),
        HeapHarness.small());
    Holder.root = null;
    h.rootsDeclared(Holder.class);
    HeapHarness.setRoot(h, a);
    long replica = PersistentHeap.addressOf(h.word(a));
    assertNotEquals(0, h.space().address(replica, 24 + 8L * n), "shm gives no native address");

    // One thread: the first and the last element, and ints of a small array (a masked word).
    a[0] = -1;
    h.storePrimitive(a, 0, -1);
    a[n - 1] = 0x8000_0000_0000_0001L;
    h.storePrimitive(a, n - 1, a[n - 1]);
    // Two threads into the same replica at once, different elements.
    Thread[] ts = new Thread[2];
    for (int t = 0; t < 2; t++) {
      int first = 1 + t;
      ts[t] = new Thread(() -> {
        for (int round = 0; round < 200; round++) {
          for (int i = first; i < n - 1; i += 2) {
            long v = a[i] * 31 + round;
            a[i] = v;
            h.storePrimitive(a, i, v);
          }
        }
      });
      ts[t].start();
    }
    for (Thread t : ts) t.join();
    long[] want = a.clone();
    h.close();

    PersistentHeap again = PersistentHeap.open(Pool.open(file, MediumChoice.SHM));
    try {
      long[] got = (long[]) HeapHarness.recoveredRoot(again);
      assertArrayEquals(want, got);
      assertEquals(0, again.stats().repairedAtOpen(), "a replica needed repair: its checks were not exact");
    } finally {
      again.close();
    }
  }

  /** Runs {@code r} in a new thread and waits for it, rethrowing what it threw. */
  private static void inThread(String name, Runnable r) throws Exception {
    Throwable[] failed = new Throwable[1];
    Thread t = new Thread(() -> {
      try {
        r.run();
      } catch (Throwable e) {
        failed[0] = e;
      }
    }, name);
    t.start();
    t.join();
    if (failed[0] != null) throw new AssertionError(name + " failed", failed[0]);
  }

  /**
   * A replica's stripe is owned by the thread that stored into it first, moves to the next
   * thread with one handshake, and is shared (a lock per store) after a second move; through
   * all of it, and with two threads storing into it at once afterwards, the replica and its
   * checks stay exact (a reopen repairs nothing and finds every value).
   */
  @Test
  void aStripeMovesOnceByHandshakeThenIsSharedAndTheChecksStayExact() throws Exception {
    Path file = dir.resolve("pool");
    int n = 64;
    long[] a = longs(n);
    PersistentHeap h = PersistentHeap.create(Pool.create(file, PersistentHeap.POOL_KIND, MediumChoice.SHM),
        HeapHarness.small());
    Holder.root = null;
    h.rootsDeclared(Holder.class);
    HeapHarness.setRoot(h, a);
    long replica = PersistentHeap.addressOf(h.word(a));
    ReplicaLocks locks = h.replicaLocks();
    int before = locks.handshakes();

    a[0] = 11;
    h.storePrimitive(a, 0, 11);
    assertTrue(locks.ownedByMe(replica), "the first storing thread does not own the stripe");
    inThread("second", () -> {
      a[1] = 22;
      h.storePrimitive(a, 1, 22);
      assertTrue(locks.ownedByMe(replica), "the stripe did not move to the second thread");
    });
    assertEquals(before + 1, locks.handshakes(), "one move, one handshake");
    assertFalse(locks.ownedByMe(replica));
    inThread("third", () -> {
      a[2] = 33;
      h.storePrimitive(a, 2, 33);
    });
    assertTrue(locks.shared(replica), "a stripe moved twice is not shared");
    assertEquals(before + 2, locks.handshakes());

    Thread[] ts = new Thread[2];
    for (int t = 0; t < 2; t++) {
      int first = t;
      ts[t] = new Thread(() -> {
        for (int round = 0; round < 2000; round++) {
          for (int i = first; i < n; i += 2) {
            long v = a[i] * 31 + round;
            a[i] = v;
            h.storePrimitive(a, i, v);
          }
        }
      });
      ts[t].start();
    }
    for (Thread t : ts) t.join();
    assertTrue(locks.shared(replica), "a shared stripe became owned again");
    long[] want = a.clone();
    h.close();

    PersistentHeap again = PersistentHeap.open(Pool.open(file, MediumChoice.SHM));
    try {
      assertArrayEquals(want, (long[]) HeapHarness.recoveredRoot(again));
      assertEquals(0, again.stats().repairedAtOpen(), "a replica needed repair: its checks were not exact");
    } finally {
      again.close();
    }
  }

  private static long fileLong(java.nio.channels.FileChannel f, long off) throws Exception {
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN);
    f.read(b, off);
    return b.flip().getLong();
  }

  private static void putFileLong(java.nio.channels.FileChannel f, long off, long v) throws Exception {
    java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(8).order(java.nio.ByteOrder.LITTLE_ENDIAN);
    f.write(b.putLong(v).flip(), off);
  }

  /**
   * A process killed during a durable store on shm leaves a prefix of its three stores in
   * memory (tmpfs keeps a dead process's stores, in the order it made them): nothing, the word,
   * the word and S2, or all three. Each prefix, made by hand from the words a real store wrote,
   * opens with the old value or the new one and every other element as it was; the word alone
   * is repaired back to the old value, the word and S2 to the new one.
   */
  @Test
  void everyPrefixOfAStoreOnShmOpensOldOrNew() throws Exception {
    int n = 7;
    for (int index : new int[] {0, n - 1}) {
      Path file = dir.resolve("pool-" + index);
      long[] a = longs(n);
      long before = a[index];
      long after = ~before ^ 0x8000_0000_0000_0001L;
      PersistentHeap h = PersistentHeap.create(Pool.create(file, PersistentHeap.POOL_KIND, MediumChoice.SHM),
          HeapHarness.small());
      Holder.root = null;
      h.rootsDeclared(Holder.class);
      HeapHarness.setRoot(h, a);
      long replica = PersistentHeap.addressOf(h.word(a));
      long base = h.space().off(replica);
      long[] offs = {base + HeapFormat.HEADER + 8L * index, base + ReplicaCheck.S2, base + ReplicaCheck.S1};
      long[] old = new long[3];
      for (int k = 0; k < 3; k++) old[k] = h.space().medium.getLong(offs[k]);
      // Two stores, so that the second goes the owned fast path the first set up.
      a[index] = before + 1;
      h.storePrimitive(a, index, before + 1);
      a[index] = before;
      h.storePrimitive(a, index, before);
      a[index] = after;
      h.storePrimitive(a, index, after);
      h.close();
      long[] neu = new long[3];
      try (var f = java.nio.channels.FileChannel.open(file, java.nio.file.StandardOpenOption.READ)) {
        for (int k = 0; k < 3; k++) neu[k] = fileLong(f, offs[k]);
      }
      assertEquals(after, neu[0], "the pool file's offsets are not the medium's");
      for (int prefix = 0; prefix <= 3; prefix++) {
        Path copy = dir.resolve("cut-" + index + "-" + prefix);
        Files.copy(file, copy);
        try (var f = java.nio.channels.FileChannel.open(copy, java.nio.file.StandardOpenOption.WRITE,
            java.nio.file.StandardOpenOption.READ)) {
          for (int k = 0; k < 3; k++) putFileLong(f, offs[k], k < prefix ? neu[k] : old[k]);
        }
        PersistentHeap again = PersistentHeap.open(Pool.open(copy, MediumChoice.SHM));
        try {
          long[] got = (long[]) HeapHarness.recoveredRoot(again);
          long want = prefix == 1 || prefix == 0 ? before : after;
          String what = "index " + index + ", the first " + prefix + " of the store's 3 writes";
          assertEquals(want, got[index], what);
          long[] rest = longs(n);
          rest[index] = want;
          assertArrayEquals(rest, got, what + ": another element changed");
          assertEquals(prefix == 1 || prefix == 2 ? 1 : 0, again.stats().repairedAtOpen(), what + ": repairs");
        } finally {
          again.close();
        }
      }
    }
  }
}
