package kioku.persist.heap;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import kioku.persist.PersistenceException;
import kioku.persist.pool.CrashMode;
import kioku.persist.pool.SimMedium;
import org.junit.jupiter.api.Test;

/**
 * Failure-atomic sections: isolation between threads (a store that returned is never undone by
 * another thread's unfinished section), logs that grow on an existing pool, a section that
 * cannot get more log rolled back whole, an exception rolling an atomic block back. The heap
 * runs on the simulated medium; stores are reported by hand as instrumented code would.
 */
class SectionsTest {
  private static final int VALUE = HeapHarness.field("value", "I");
  private static final int BIG = HeapHarness.field("big", "J");

  private static Node graph() {
    Node a = new Node();
    a.value = -7;
    a.big = 11;
    a.next = new Node();
    a.next.value = 100;
    a.numbers = new int[] {1, 2, 3, 4};
    return a;
  }

  private static Node recovered(SimMedium m) throws Exception {
    return (Node) HeapHarness.recoveredRoot(HeapHarness.open(SimMedium.fromImage(m.crash(CrashMode.DRAINED_ONLY))));
  }

  private static void set(PersistentHeap h, Node n, int value) {
    n.value = value;
    h.putPrimitive(n, value & 0xffffffffL, VALUE);
  }

  private static void setBig(PersistentHeap h, Node n, long big) {
    n.big = big;
    h.putPrimitive(n, big, BIG);
  }

  private static void await(CountDownLatch l) {
    try {
      assertTrue(l.await(30, TimeUnit.SECONDS), "timed out");
    } catch (InterruptedException e) {
      throw new AssertionError(e);
    }
  }

  private static void waitUntilWaiting(Thread t) throws InterruptedException {
    for (int i = 0; i < 30_000; i++) {
      Thread.State s = t.getState();
      if (s == Thread.State.WAITING || s == Thread.State.TIMED_WAITING) return;
      if (!t.isAlive()) return;
      Thread.sleep(1);
    }
    fail(t.getName() + " never waited");
  }

  /**
   * The loss: t1's atomic block writes the counter and lets go of the lock but stays
   * open; t2's block then increments the same counter and returns. A crash must not undo t2's
   * acknowledged store. Here t1 never ends, so t2's end waits the isolation limit, then both
   * commit as they stand.
   */
  @Test
  void anAcknowledgedStoreSurvivesAnotherThreadsUnfinishedSection() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m, new PersistentHeap.Options(1 << 20, 2, 64 << 10, 100));
    Node a = graph();
    HeapHarness.setRoot(h, a);
    Object lock = new Object();
    CountDownLatch wrote = new CountDownLatch(1);
    CountDownLatch never = new CountDownLatch(1);
    Thread t1 = new Thread(() -> h.atomically(() -> {
      synchronized (lock) {
        set(h, a, a.value + 1);
      }
      wrote.countDown();
      await(never);
    }), "t1");
    t1.setDaemon(true);
    t1.start();
    await(wrote);
    h.atomically(() -> {
      synchronized (lock) {
        set(h, a, a.value + 1);
      }
    });
    // t2 (this thread) returned: its count, -5, is acknowledged.
    assertEquals(-5, recovered(m).value);
    assertEquals(1, h.stats().earlyCommits());
    never.countDown();
    t1.join();
  }

  /**
   * When the other section ends in time, the two commit together: a crash before leaves both
   * undone, after leaves both, never t1's undone under t2's.
   */
  @Test
  void dependentSectionsCommitTogether() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m, new PersistentHeap.Options(1 << 20, 2, 64 << 10, 60_000));
    Node a = graph();
    HeapHarness.setRoot(h, a);
    CountDownLatch wrote = new CountDownLatch(1);
    CountDownLatch go = new CountDownLatch(1);
    Thread t1 = new Thread(() -> h.atomically(() -> {
      set(h, a, 1);
      wrote.countDown();
      await(go);
      setBig(h, a, 5);
    }), "t1");
    t1.start();
    await(wrote);
    Thread t2 = new Thread(() -> h.atomically(() -> {
      set(h, a, 2); // a word t1's open section owns
      set(h, a.next, 3);
    }), "t2");
    t2.start();
    waitUntilWaiting(t2); // at its end, for t1
    Node mid = recovered(m);
    assertEquals(-7, mid.value, "nothing committed while t1 is open");
    assertEquals(100, mid.next.value);
    go.countDown();
    t1.join();
    t2.join();
    Node after = recovered(m);
    assertEquals(2, after.value);
    assertEquals(5, after.big);
    assertEquals(3, after.next.value);
    assertEquals(0, h.stats().earlyCommits());
  }

  /**
   * The group commit cut at every ordering point: each image recovers to before both sections
   * or after both, never one without the other.
   */
  @Test
  void aGroupCommitCutAnywhereIsAllOrNothing() throws Exception {
    long points = runGroup(-1);
    assertTrue(points > 10, "points " + points);
    for (long n = 0; n < points; n++) {
      SimMedium m = SimMedium.create(0);
      long start = prepareGroup(m);
      m.cutPowerAt(start + n);
      runGroupOn(m);
      for (CrashMode mode : new CrashMode[] {CrashMode.DRAINED_ONLY, CrashMode.ALL_FLUSHED,
          CrashMode.random(n, true, true), CrashMode.random(n + 7919, true, true)}) {
        Node r = (Node) HeapHarness.recoveredRoot(HeapHarness.open(SimMedium.fromImage(m.crash(mode))));
        String got = r.value + "," + r.big + "," + r.next.value;
        if (!got.equals("-7,11,100") && !got.equals("2,5,3")) {
          fail("cut at " + n + " (" + mode + "): " + got);
        }
      }
    }
  }

  private PersistentHeap groupHeap;
  private Node groupRoot;

  private long prepareGroup(SimMedium m) throws Exception {
    groupHeap = HeapHarness.create(m, new PersistentHeap.Options(1 << 20, 2, 64 << 10, 60_000));
    groupRoot = graph();
    HeapHarness.setRoot(groupHeap, groupRoot);
    return m.orderingPoints();
  }

  private long runGroup(long unused) throws Exception {
    SimMedium m = SimMedium.create(0);
    long start = prepareGroup(m);
    runGroupOn(m);
    return m.orderingPoints() - start;
  }

  /** t1 and t2 as above, in a fixed order (so every run has the same ordering points). */
  private void runGroupOn(SimMedium m) throws Exception {
    PersistentHeap h = groupHeap;
    Node a = groupRoot;
    CountDownLatch wrote = new CountDownLatch(1);
    CountDownLatch go = new CountDownLatch(1);
    Thread t1 = new Thread(() -> h.atomically(() -> {
      set(h, a, 1);
      wrote.countDown();
      await(go);
      setBig(h, a, 5);
    }), "t1");
    t1.start();
    await(wrote);
    Thread t2 = new Thread(() -> h.atomically(() -> {
      set(h, a, 2);
      set(h, a.next, 3);
    }), "t2");
    t2.start();
    waitUntilWaiting(t2);
    go.countDown();
    t1.join();
    t2.join();
  }

  /**
   * A store outside any section into a word an open atomic block owns is acknowledged only
   * once that block commits, and then survives with it.
   */
  @Test
  void aPlainStoreIntoAnOwnedWordWaitsForTheOwner() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m, new PersistentHeap.Options(1 << 20, 2, 64 << 10, 60_000));
    Node a = graph();
    HeapHarness.setRoot(h, a);
    CountDownLatch wrote = new CountDownLatch(1);
    CountDownLatch go = new CountDownLatch(1);
    Thread t1 = new Thread(() -> h.atomically(() -> {
      set(h, a, 1);
      wrote.countDown();
      await(go);
      setBig(h, a, 5);
    }), "t1");
    t1.start();
    await(wrote);
    Thread plain = new Thread(() -> set(h, a, 9), "plain");
    plain.start();
    waitUntilWaiting(plain);
    assertEquals(-7, recovered(m).value, "the plain store is not acknowledged yet");
    go.countDown();
    t1.join();
    plain.join();
    Node r = recovered(m);
    assertEquals(9, r.value);
    assertEquals(5, r.big);
  }

  /**
   * A plain store waiting for an owner that waits for a lock the plain writer holds: kioku
   * sees the deadlock and commits both as they stand.
   */
  @Test
  void aDeadlockBetweenAnOwnerAndAWriterIsBroken() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m, new PersistentHeap.Options(1 << 20, 2, 64 << 10, 600_000));
    Node a = graph();
    HeapHarness.setRoot(h, a);
    Object lock = new Object();
    CountDownLatch wrote = new CountDownLatch(1);
    CountDownLatch plainHasLock = new CountDownLatch(1);
    Thread t1 = new Thread(() -> h.atomically(() -> {
      synchronized (lock) {
        set(h, a, 1);
      }
      wrote.countDown();
      await(plainHasLock);
      synchronized (lock) { // blocks: the plain writer holds it while it waits for t1
        setBig(h, a, 5);
      }
    }), "t1");
    t1.start();
    await(wrote);
    Thread plain = new Thread(() -> {
      synchronized (lock) {
        plainHasLock.countDown();
        set(h, a, 9);
      }
    }, "plain");
    plain.start();
    plain.join(60_000);
    t1.join(60_000);
    assertTrue(!plain.isAlive() && !t1.isAlive(), "deadlocked");
    assertEquals(1, h.stats().earlyCommits());
    Node r = recovered(m);
    assertEquals(9, r.value);
    assertEquals(5, r.big);
  }

  /** An exception leaving an atomic block undoes its stores, in the pool and in memory. */
  @Test
  void anExceptionRollsTheBlockBack() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    Node a = graph();
    HeapHarness.setRoot(h, a);
    Node fresh = new Node();
    fresh.value = 55;
    int next = HeapHarness.field("next", "Lkioku/persist/heap/Node;");
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> h.atomically(() -> {
      set(h, a, 1);
      setBig(h, a, 2);
      a.numbers[1] = 20;
      h.storePrimitive(a.numbers, 1, 20);
      Node old = a.next;
      a.next = fresh;
      h.putReference(a, fresh, old, next);
      throw new IllegalStateException("boom");
    }));
    assertEquals("boom", e.getMessage());
    assertEquals(-7, a.value);
    assertEquals(11, a.big);
    assertArrayEquals(new int[] {1, 2, 3, 4}, a.numbers);
    assertEquals(100, a.next.value, "the reference is back too");
    assertTrue(h.verify(a).isEmpty(), h.verify(a).toString());
    Node r = recovered(m);
    assertEquals(-7, r.value);
    assertEquals(100, r.next.value);
    assertArrayEquals(new int[] {1, 2, 3, 4}, r.numbers);
    // The heap goes on working afterwards.
    h.atomically(() -> set(h, a, 8));
    assertEquals(8, recovered(m).value);
  }

  /**
   * An exception in a block another thread's section has joined cannot undo it (that thread
   * built on its stores): it commits with that thread.
   */
  @Test
  void anExceptionInABlockOthersDependOnCommits() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m, new PersistentHeap.Options(1 << 20, 2, 64 << 10, 60_000));
    Node a = graph();
    HeapHarness.setRoot(h, a);
    CountDownLatch wrote = new CountDownLatch(1);
    CountDownLatch go = new CountDownLatch(1);
    AtomicReference<Throwable> thrown = new AtomicReference<>();
    Thread t1 = new Thread(() -> {
      try {
        h.atomically(() -> {
          set(h, a, 1);
          wrote.countDown();
          await(go);
          throw new IllegalStateException("t1 fails");
        });
      } catch (IllegalStateException e) {
        thrown.set(e);
      }
    }, "t1");
    t1.start();
    await(wrote);
    Thread t2 = new Thread(() -> h.atomically(() -> set(h, a, a.value + 10)), "t2");
    t2.start();
    waitUntilWaiting(t2);
    go.countDown();
    t1.join();
    t2.join();
    assertEquals("t1 fails", thrown.get().getMessage());
    assertEquals(11, a.value);
    assertEquals(11, recovered(m).value);
  }

  /** A section longer than the pool's first log, on an existing pool: the log grows. */
  @Test
  void aLogGrowsOnAnExistingPool() throws Exception {
    SimMedium first = SimMedium.create(0);
    PersistentHeap h0 = HeapHarness.create(first, new PersistentHeap.Options(1 << 20, 1, 4096));
    Node a0 = graph();
    a0.numbers = new int[4000];
    HeapHarness.setRoot(h0, a0);
    SimMedium m = SimMedium.fromImage(first.crash(CrashMode.DRAINED_ONLY));
    PersistentHeap h = HeapHarness.reopen(m, 1000);
    Node a = (Node) Holder.root;
    int blocks = h.stats().logBlocks();
    h.atomically(() -> {
      for (int i = 0; i < a.numbers.length; i++) {
        a.numbers[i] = i;
        h.storePrimitive(a.numbers, i, i);
      }
    });
    assertTrue(h.stats().logBlocks() > blocks, "the log grew: " + h.stats().logBlocks());
    int[] got = recovered(m).numbers;
    for (int i = 0; i < got.length; i++) assertEquals(i, got[i]);
  }

  /** Its growth (a new pool section, a commit, chained blocks) cut at every ordering point. */
  @Test
  void aGrowingLogCutAnywhereIsAllOrNothing() throws Exception {
    SimMedium first = SimMedium.create(0);
    PersistentHeap h0 = HeapHarness.create(first, new PersistentHeap.Options(1 << 20, 1, 2048));
    Node a0 = graph();
    a0.numbers = new int[300]; // 150 words: 82 entries per block, so three blocks, two areas
    HeapHarness.setRoot(h0, a0);
    byte[] base = first.crash(CrashMode.DRAINED_ONLY);
    long points = -1;
    for (long n = 0; points < 0 || n < points; n++) {
      SimMedium m = SimMedium.fromImage(base);
      PersistentHeap h = HeapHarness.reopen(m, 1000);
      Node a = (Node) Holder.root;
      long start = m.orderingPoints();
      if (points >= 0) m.cutPowerAt(start + n);
      h.atomically(() -> {
        for (int i = 0; i < a.numbers.length; i++) {
          a.numbers[i] = i + 1;
          h.storePrimitive(a.numbers, i, i + 1);
        }
      });
      if (points < 0) {
        points = m.orderingPoints() - start;
        n = -1;
        continue;
      }
      for (CrashMode mode : new CrashMode[] {CrashMode.ALL_FLUSHED, CrashMode.random(n, true, true)}) {
        int[] got = ((Node) HeapHarness.recoveredRoot(HeapHarness.open(SimMedium.fromImage(m.crash(mode))))).numbers;
        boolean before = true;
        boolean after = true;
        for (int i = 0; i < got.length; i++) {
          before &= got[i] == 0;
          after &= got[i] == i + 1;
        }
        assertTrue(before || after, "cut at " + n + " of " + points + " (" + mode + "): " + java.util.Arrays.toString(got));
      }
    }
  }

  /** The pool cannot grow: the section is rolled back whole before the exception. */
  @Test
  void aSectionThatCannotGetMoreLogIsRolledBackWhole() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m, new PersistentHeap.Options(1 << 20, 1, 4096));
    Node a = graph();
    a.numbers = new int[4000];
    HeapHarness.setRoot(h, a);
    m.limitLength(m.length());
    PersistenceException e = assertThrows(PersistenceException.class, () -> h.atomically(() -> {
      set(h, a, 1);
      for (int i = 0; i < a.numbers.length; i++) {
        a.numbers[i] = 7;
        h.storePrimitive(a.numbers, i, 7);
      }
    }));
    assertTrue(e.getMessage().contains("rolled back whole"), e.getMessage());
    assertEquals(-7, a.value, "undone in memory");
    for (int v : a.numbers) assertEquals(0, v, "every element, the failing one too");
    Node r = recovered(m);
    assertEquals(-7, r.value);
    for (int v : r.numbers) assertEquals(0, v);
    assertTrue(h.verify(a).isEmpty(), h.verify(a).toString());
  }

  /** A block that throws, cut at every ordering point of it and of its rollback: never partial. */
  @Test
  void aRollbackCutAnywhereLeavesTheStateBefore() throws Exception {
    long points = -1;
    for (long n = 0; points < 0 || n < points; n++) {
      SimMedium m = SimMedium.create(0);
      PersistentHeap h = HeapHarness.create(m);
      Node a = graph();
      HeapHarness.setRoot(h, a);
      long start = m.orderingPoints();
      if (points >= 0) m.cutPowerAt(start + n);
      assertThrows(IllegalStateException.class, () -> h.atomically(() -> {
        set(h, a, 1);
        setBig(h, a, 2);
        set(h, a.next, 3);
        a.numbers[0] = 9;
        h.storePrimitive(a.numbers, 0, 9);
        throw new IllegalStateException();
      }));
      if (points < 0) {
        points = m.orderingPoints() - start;
        n = -1;
        continue;
      }
      for (CrashMode mode : new CrashMode[] {CrashMode.ALL_FLUSHED, CrashMode.random(n, true, true)}) {
        Node r = (Node) HeapHarness.recoveredRoot(HeapHarness.open(SimMedium.fromImage(m.crash(mode))));
        String got = r.value + "," + r.big + "," + r.next.value + "," + r.numbers[0];
        assertEquals("-7,11,100,1", got, "cut at " + n + " of " + points + " (" + mode + ")");
      }
    }
  }

  /** A root moved by the roots= option when the pool opens, cut anywhere: in one place or the other. */
  @Test
  void aRootMoveCutAnywhereKeepsTheRootInOnePlace() throws Exception {
    SimMedium first = SimMedium.create(0);
    PersistentHeap h0 = HeapHarness.create(first);
    HeapHarness.setRoot(h0, graph());
    byte[] base = first.crash(CrashMode.DRAINED_ONLY);
    String from = "kioku.persist.heap.Holder#root";
    String to = "kioku.persist.heap.Holder#renamed";
    RootNames move = RootNames.parse(from + ">" + to);
    long points = -1;
    for (long n = 0; points < 0 || n < points; n++) {
      SimMedium m = SimMedium.fromImage(base);
      long start = m.orderingPoints();
      if (points >= 0) m.cutPowerAt(start + n);
      PersistentHeap.open(kioku.persist.pool.Pool.open(m), 1000, move);
      if (points < 0) {
        points = m.orderingPoints() - start;
        n = -1;
        continue;
      }
      for (CrashMode mode : new CrashMode[] {CrashMode.ALL_FLUSHED, CrashMode.random(n, true, true)}) {
        java.util.Map<String, Long> roots = HeapHarness.open(SimMedium.fromImage(m.crash(mode))).roots();
        long a = roots.getOrDefault(from, 0L);
        long b = roots.getOrDefault(to, 0L);
        assertTrue((a != 0) != (b != 0), "cut at " + n + " (" + mode + "): " + roots);
      }
    }
    assertTrue(points > 0);
  }
}
