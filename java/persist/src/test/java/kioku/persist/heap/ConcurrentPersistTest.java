package kioku.persist.heap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import kioku.persist.pool.CrashMode;
import kioku.persist.pool.SimMedium;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Two threads making graphs persistent at once (the thesis's responsible threads): each case
 * is forced into its interleaving by the heap's test probe, so every run takes the same path.
 * Disjoint graphs do not wait for each other; a thread that meets the other's grey object joins
 * its group and returns only once the whole group is durable; graphs that reach each other in
 * opposite orders do not deadlock; no object gets two replicas; a power cut anywhere leaves
 * each new graph absent or whole.
 */
class ConcurrentPersistTest {
  private static final long WAIT_SECONDS = 30;

  @AfterEach
  void clearProbe() {
    PersistentHeap.probe = null;
  }

  /** A chain of {@code n} nodes with values from {@code first}, ending in {@code tail}. */
  private static Node chain(int first, int n, Node tail) {
    Node head = tail;
    for (int i = n - 1; i >= 0; i--) {
      Node x = new Node();
      x.value = first + i;
      x.name = "n" + (first + i);
      x.next = head;
      head = x;
    }
    return head;
  }

  /** A heap whose root is a persistent array of two slots, one per thread. */
  private static PersistentHeap heapWithSlots(SimMedium m, Object[] slots) throws Exception {
    PersistentHeap h = HeapHarness.create(m);
    HeapHarness.setRoot(h, slots);
    return h;
  }

  /** What {@code slots[i] = g} does under the agent. */
  private static void store(PersistentHeap h, Object[] slots, int i, Object g) {
    Object old = slots[i];
    slots[i] = g;
    h.storeReference(slots, i, g, old);
  }

  /** Runs both stores in their own threads; fails on an exception or a wait past the limit. */
  private static void both(Runnable a, Runnable b) throws Exception {
    AtomicReference<Throwable> err = new AtomicReference<>();
    Thread ta = new Thread(() -> run(a, err), "mp-a");
    Thread tb = new Thread(() -> run(b, err), "mp-b");
    ta.start();
    tb.start();
    ta.join(TimeUnit.SECONDS.toMillis(WAIT_SECONDS));
    tb.join(TimeUnit.SECONDS.toMillis(WAIT_SECONDS));
    if (ta.isAlive() || tb.isAlive()) fail("deadlock: a thread still runs after " + WAIT_SECONDS + " s");
    if (err.get() != null) throw new AssertionError(err.get());
  }

  private static void run(Runnable r, AtomicReference<Throwable> err) {
    try {
      r.run();
    } catch (Throwable t) {
      err.compareAndSet(null, t);
    }
  }

  private static void await(CyclicBarrier b) {
    try {
      b.await(WAIT_SECONDS, TimeUnit.SECONDS);
    } catch (Exception e) {
      throw new AssertionError("the other thread never came: " + e, e);
    }
  }

  private static void await(CountDownLatch l) {
    try {
      if (!l.await(WAIT_SECONDS, TimeUnit.SECONDS)) throw new AssertionError("never counted down");
    } catch (InterruptedException e) {
      throw new AssertionError(e);
    }
  }

  /** Waits until the heap counts {@code n} group joins. */
  private static void awaitJoins(PersistentHeap h, long n) {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_SECONDS);
    while (h.groupJoins() < n) {
      if (System.nanoTime() > end) throw new AssertionError("no join: " + h.groupJoins());
      Thread.onSpinWait();
    }
  }

  private static Thread thread(String name) {
    return Thread.currentThread().getName().equals(name) ? Thread.currentThread() : null;
  }

  /** Every node of the chain from {@code head} with its replica, and the heap's replicas agree. */
  private static void assertDurable(PersistentHeap h, Object root, Node head, int first, int n) {
    List<String> diffs = h.verify(root);
    assertTrue(diffs.isEmpty(), diffs.toString());
    Node x = head;
    for (int i = 0; i < n; i++) {
      assertEquals(first + i, x.value);
      long w = h.word(x);
      assertTrue(w != 0 && (w & 2) == 0, "node " + (first + i) + " persistent and published: " + w);
      x = x.next;
    }
  }

  /** Disjoint graphs: both threads are inside make_persistent at once; nobody joins. */
  @Test
  void disjointGraphsDoNotSerialise() throws Exception {
    SimMedium m = SimMedium.create(0);
    Object[] slots = new Object[2];
    PersistentHeap h = heapWithSlots(m, slots);
    Node ga = chain(0, 50, null);
    Node gb = chain(100, 50, null);
    CyclicBarrier bothCopied = new CyclicBarrier(2);
    // Each waits, copied and flushed, for the other to be there too: with make_persistent
    // serialised the second would never start while the first waits.
    PersistentHeap.probe = new PersistentHeap.PersistProbe() {
      @Override
      public void shaded(Object o) {}

      @Override
      public void waiting() {
        await(bothCopied);
      }
    };
    both(() -> store(h, slots, 0, ga), () -> store(h, slots, 1, gb));
    assertEquals(0, h.groupJoins());
    assertDurable(h, slots, ga, 0, 50);
    assertDurable(h, slots, gb, 100, 50);
    Object[] back = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertChain((Node) back[0], 0, 50);
    assertChain((Node) back[1], 100, 50);
  }

  /**
   * A shared subgraph: A shades the shared node and stops; B meets it grey, joins A's group,
   * and may not return before A's replicas are durable. One replica for the shared node.
   */
  @Test
  void aSharedSubgraphJoinsTheGroupAndHasOneReplica() throws Exception {
    SimMedium m = SimMedium.create(0);
    Object[] slots = new Object[2];
    PersistentHeap h = heapWithSlots(m, slots);
    Node shared = chain(1000, 20, null);
    Node ga = chain(0, 10, shared);
    Node gb = chain(100, 10, shared);
    assertFalse(
        bReturnsEarlyJoiningAt(h, slots, shared, ga, gb),
        "B returned before A's part of the group was durable");
    assertEquals(1, h.groupJoins());
    assertDurable(h, slots, ga, 0, 10);
    assertDurable(h, slots, gb, 100, 10);
    assertSame(after(ga, 10), after(gb, 10));
    Object[] back = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertChain((Node) back[0], 0, 10);
    assertChain((Node) back[1], 100, 10);
    Node ra = after((Node) back[0], 10);
    assertSame(ra, after((Node) back[1], 10), "the shared node has one replica: recovered once");
    assertChain(ra, 1000, 20);
  }

  /**
   * Graphs that reach each other in opposite orders: A's head points to B's, B's to A's; each
   * shades its own head first, then meets the other's grey. One group, no deadlock.
   */
  @Test
  void mutualReachInOppositeOrdersDoesNotDeadlock() throws Exception {
    SimMedium m = SimMedium.create(0);
    Object[] slots = new Object[2];
    PersistentHeap h = heapWithSlots(m, slots);
    Node ga = chain(0, 10, null);
    Node gb = chain(100, 10, null);
    last(ga).next = gb; // A's graph reaches B's head
    last(gb).next = ga; // and B's reaches A's
    shadeHeadsTogether(ga, gb);
    both(() -> store(h, slots, 0, ga), () -> store(h, slots, 1, gb));
    assertTrue(h.groupJoins() >= 1, "joins " + h.groupJoins());
    assertDurable(h, slots, ga, 0, 10);
    assertDurable(h, slots, gb, 100, 10);
    Object[] back = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    Node ra = (Node) back[0];
    Node rb = (Node) back[1];
    assertChain(ra, 0, 10);
    assertChain(rb, 100, 10);
    assertSame(rb, after(ra, 10), "A's tail leads to B's head: one replica of it");
    assertSame(ra, after(rb, 10));
  }

  /**
   * One thread's graph a subgraph of the other's: A is copying the big graph and has shaded
   * B's root; B's make_persistent of it joins A's group and returns only when A's is durable.
   */
  @Test
  void aSubgraphOfAnotherThreadsGraphWaitsForItsGroup() throws Exception {
    SimMedium m = SimMedium.create(0);
    Object[] slots = new Object[2];
    PersistentHeap h = heapWithSlots(m, slots);
    Node sub = chain(500, 10, null);
    Node big = chain(0, 30, sub);
    assertFalse(
        bReturnsEarlyJoiningAt(h, slots, sub, big, sub),
        "B returned before A's group was durable");
    assertEquals(1, h.groupJoins());
    assertDurable(h, slots, big, 0, 30);
    assertDurable(h, slots, sub, 500, 10);
    Object[] back = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertChain((Node) back[0], 0, 30);
    assertSame(back[1], after((Node) back[0], 30), "the subgraph has one replica");
    assertChain((Node) back[1], 500, 10);
  }

  /**
   * A member that fails (a refused object in its part) fails the group; the other member, whose
   * own graph is fine, tries again and succeeds; nothing of the failed graph stays persistent.
   */
  @Test
  void aFailedMemberMakesTheOtherTryAgain() throws Exception {
    SimMedium m = SimMedium.create(0);
    Object[] slots = new Object[2];
    PersistentHeap h = heapWithSlots(m, slots);
    Node shared = chain(1000, 5, null);
    Node ga = chain(0, 5, shared);
    // Refused (not persistable), far enough down A's graph that A shades the shared node first.
    Node deep = chain(200, 20, null);
    last(deep).things = new Object[] {new Thread()};
    ga.things = new Object[] {deep};
    Node gb = chain(100, 5, shared);
    AtomicReference<Throwable> aFailure = new AtomicReference<>();
    CountDownLatch aStarted = new CountDownLatch(1);
    PersistentHeap.probe = new PersistentHeap.PersistProbe() {
      @Override
      public void shaded(Object o) {
        if (o == shared && thread("mp-a") != null) {
          aStarted.countDown();
          awaitJoins(h, 1);
        }
      }

      @Override
      public void waiting() {}
    };
    both(
        () -> {
          try {
            store(h, slots, 0, ga);
          } catch (RuntimeException e) {
            aFailure.set(e);
          }
        },
        () -> {
          await(aStarted);
          store(h, slots, 1, gb);
        });
    assertNotNull(aFailure.get(), "A's graph holds a Thread: refused");
    assertNull(slots[0], "the refused store did not happen");
    assertEquals(0, h.word(ga), "A's objects are white again");
    assertEquals(0, h.word(deep));
    assertEquals(1, h.groupJoins(), "B joined A's group before A failed");
    assertDurable(h, slots, gb, 100, 5);
    assertDurable(h, slots, shared, 1000, 5);
    Object[] back = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertNull(back[0]);
    assertChain((Node) back[1], 100, 5);
  }

  /**
   * Power cut at every ordering point of two threads persisting graphs that reach each other
   * (one group): each image opens (nothing half-written is reachable: its checks would refuse
   * it) and each slot is empty or holds its whole graph.
   */
  @Test
  void aConcurrentGroupCutAnywhereIsAbsentOrWhole() throws Exception {
    long points = runMutual(SimMedium.create(0), -1);
    assertTrue(points > 10, "points " + points);
    for (long n = 0; n < points; n++) {
      SimMedium m = SimMedium.create(0);
      runMutual(m, n);
      // Only what was drained, and a random part of what was flushed besides.
      for (CrashMode mode : new CrashMode[] {CrashMode.DRAINED_ONLY, CrashMode.random(n, true, true)}) {
        Object[] back;
        try {
          back = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(SimMedium.fromImage(m.crash(mode))));
        } catch (Exception e) {
          throw new AssertionError("cut at " + n + " of " + points + " (" + mode + "): " + e, e);
        }
        String where = "cut at " + n + " of " + points + " (" + mode + ")";
        for (int i = 0; i < 2; i++) {
          if (back[i] == null) continue;
          Node x = (Node) back[i];
          int first = i == 0 ? 0 : 100;
          int other = i == 0 ? 100 : 0;
          try {
            assertChain(x, first, 6);
            // The other thread's graph, reached through this one.
            assertChain(after(x, 6), other, 6);
          } catch (AssertionError e) {
            throw new AssertionError(where + ": slot " + i + ": " + e.getMessage(), e);
          }
        }
      }
    }
  }

  /** The mutual case with the power cut at ordering point {@code cut} after setup; its points. */
  private long runMutual(SimMedium m, long cut) throws Exception {
    Object[] slots = new Object[2];
    PersistentHeap h = heapWithSlots(m, slots);
    long start = m.orderingPoints();
    if (cut >= 0) m.cutPowerAt(start + cut);
    Node ga = chain(0, 6, null);
    Node gb = chain(100, 6, null);
    last(ga).next = gb;
    last(gb).next = ga;
    shadeHeadsTogether(ga, gb);
    both(() -> store(h, slots, 0, ga), () -> store(h, slots, 1, gb));
    PersistentHeap.probe = null;
    return m.orderingPoints() - start;
  }

  /**
   * Thread A stores {@code aRoot} into slot 0 and B {@code bRoot} into slot 1; B starts once A
   * has shaded {@code meet} (A stops there until B, meeting it grey, joins A's group). Returns
   * whether B returned while A's part of the group was not yet durable.
   */
  private static boolean bReturnsEarlyJoiningAt(
      PersistentHeap h, Object[] slots, Node meet, Node aRoot, Node bRoot) throws Exception {
    AtomicBoolean bReturned = new AtomicBoolean();
    AtomicBoolean bReturnedEarly = new AtomicBoolean();
    CountDownLatch aShaded = new CountDownLatch(1);
    PersistentHeap.probe = new PersistentHeap.PersistProbe() {
      @Override
      public void shaded(Object o) {
        if (o == meet && thread("mp-a") != null) {
          aShaded.countDown();
          awaitJoins(h, 1);
        }
      }

      @Override
      public void waiting() {
        if (thread("mp-a") != null) {
          // B has copied its part and waits for A's: it must not have returned.
          sleepBriefly();
          bReturnedEarly.set(bReturned.get());
        }
      }
    };
    both(
        () -> store(h, slots, 0, aRoot),
        () -> {
          await(aShaded);
          store(h, slots, 1, bRoot);
          bReturned.set(true);
        });
    return bReturnedEarly.get();
  }

  /** Each thread, once it has shaded its own head ({@code ga} or {@code gb}), waits for the other. */
  private static void shadeHeadsTogether(Node ga, Node gb) {
    CyclicBarrier headsShaded = new CyclicBarrier(2);
    PersistentHeap.probe = new PersistentHeap.PersistProbe() {
      @Override
      public void shaded(Object o) {
        if (o == ga || o == gb) await(headsShaded);
      }

      @Override
      public void waiting() {}
    };
  }

  /** The node {@code k} links after {@code n}. */
  private static Node after(Node n, int k) {
    for (int i = 0; i < k; i++) n = n.next;
    return n;
  }

  /** The last node of the chain from {@code n}. */
  private static Node last(Node n) {
    while (n.next != null) n = n.next;
    return n;
  }

  private static void assertChain(Node head, int first, int n) {
    Node x = head;
    for (int i = 0; i < n; i++) {
      assertNotNull(x, "node " + (first + i));
      assertEquals(first + i, x.value);
      assertEquals("n" + (first + i), x.name);
      x = x.next;
    }
  }

  private static SimMedium reopen(SimMedium m) {
    return SimMedium.fromImage(m.crash(CrashMode.DRAINED_ONLY));
  }

  private static void sleepBriefly() {
    try {
      Thread.sleep(50);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
