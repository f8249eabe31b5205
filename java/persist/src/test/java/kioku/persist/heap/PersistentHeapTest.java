package kioku.persist.heap;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import kioku.persist.NotPersistableException;
import kioku.persist.pool.CrashMode;
import kioku.persist.pool.SimMedium;
import org.junit.jupiter.api.Test;

class PersistentHeapTest {
  private static Node graph() {
    Node a = new Node();
    Node b = new Node();
    a.value = -7;
    a.big = Long.MIN_VALUE + 3;
    a.ratio = Math.PI;
    a.flag = true;
    a.letter = 'é';
    a.name = "héllo, 世界";
    a.next = b;
    a.numbers = new int[] {1, -2, 3, Integer.MAX_VALUE};
    a.things = new Object[] {"x", 42, 7L, b, null, a, new long[] {9, 8}};
    a.color = Node.Color.GREEN;
    a.notPersisted = new Object();
    b.value = 2;
    b.next = a; // a cycle
    b.name = a.name; // shared
    return a;
  }

  private static SimMedium reopen(SimMedium m) {
    return SimMedium.fromImage(m.crash(CrashMode.DRAINED_ONLY));
  }

  @Test
  void aGraphSurvivesAndComesBackWhole() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    HeapHarness.setRoot(h, graph());
    PersistentHeap again = HeapHarness.open(reopen(m));
    Node a = (Node) HeapHarness.recoveredRoot(again);
    assertEquals(-7, a.value);
    assertEquals(Long.MIN_VALUE + 3, a.big);
    assertEquals(Math.PI, a.ratio);
    assertTrue(a.flag);
    assertEquals('é', a.letter);
    assertEquals("héllo, 世界", a.name);
    assertSame(a, a.next.next);
    assertSame(a.name, a.next.name);
    assertArrayEquals(new int[] {1, -2, 3, Integer.MAX_VALUE}, a.numbers);
    assertEquals("x", a.things[0]);
    assertEquals(42, a.things[1]);
    assertEquals(7L, a.things[2]);
    assertSame(a.next, a.things[3]);
    assertNull(a.things[4]);
    assertSame(a, a.things[5]);
    assertArrayEquals(new long[] {9, 8}, (long[]) a.things[6]);
    assertSame(Node.Color.GREEN, a.color);
    assertNull(a.notPersisted, "transient fields of application classes are not persistent");
    assertTrue(again.word(a) != 0, "recovered objects are persistent");
  }

  @Test
  void writesThroughTheBarrierReachTheReplica() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    Node a = graph();
    HeapHarness.setRoot(h, a);
    a.value = 99;
    h.putPrimitive(a, 99, HeapHarness.field("value", "I"));
    a.ratio = -0.5;
    h.putPrimitive(a, Double.doubleToRawLongBits(-0.5), HeapHarness.field("ratio", "D"));
    Node c = new Node();
    c.name = "new";
    Node b0 = a.next;
    a.next = c;
    h.putReference(a, c, b0, HeapHarness.field("next", "Lkioku/persist/heap/Node;"));
    a.numbers[2] = -30;
    h.storePrimitive(a.numbers, 2, -30 & 0xffffffffL);
    a.things[0] = "y";
    h.storeReference(a.things, 0, "y", "x");
    Node a2 = (Node) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertEquals(99, a2.value);
    assertEquals(-0.5, a2.ratio);
    assertEquals("new", a2.next.name);
    assertArrayEquals(new int[] {1, -2, -30, Integer.MAX_VALUE}, a2.numbers);
    assertEquals("y", a2.things[0]);
  }

  @Test
  void aWriteNotThroughTheBarrierIsNotDurable() throws Exception {
    // The replica only changes through the barrier: this is what the agent is for.
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    Node a = graph();
    HeapHarness.setRoot(h, a);
    a.value = 1234;
    Node a2 = (Node) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertEquals(-7, a2.value);
  }

  @Test
  void anObjectOfAnUninterceptableClassIsRefusedByName() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    Node a = new Node();
    a.things = new Object[] {new java.util.concurrent.ConcurrentHashMap<String, String>()};
    NotPersistableException e =
        assertThrows(NotPersistableException.class, () -> HeapHarness.setRoot(h, a));
    assertTrue(e.getMessage().contains("java.util.concurrent.ConcurrentHashMap"), e.getMessage());
    assertEquals(0, h.word(a), "a refused graph stays white");
    // Its replicas are freed: refusing it again takes no more space (what is used is the
    // segments this thread holds for its next make_persistent, at most one per size class).
    long used = h.stats().usedBytes();
    assertTrue(used <= 40L * 4096, "used " + used);
    for (int i = 0; i < 3; i++) {
      assertThrows(NotPersistableException.class, () -> HeapHarness.setRoot(h, a));
      assertEquals(used, h.stats().usedBytes(), "and its replicas are freed");
    }
    assertNull(Holder.root, "the refused store did not happen, in memory either");
    // A store into a persistent object: refused, the field keeps its old value.
    Node ok = graph();
    HeapHarness.setRoot(h, ok);
    Node old = ok.next;
    Node bad = new Node();
    bad.things = new Object[] {new Thread()};
    ok.next = bad;
    int next = HeapHarness.field("next", "Lkioku/persist/heap/Node;");
    assertThrows(NotPersistableException.class, () -> h.putReference(ok, bad, old, next));
    assertSame(old, ok.next);
    assertTrue(h.verify(ok).isEmpty(), h.verify(ok).toString());
  }

  @Test
  void garbageIsCollectedAndTheWordsOfDeadReplicasCleared() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    Node a = graph();
    HeapHarness.setRoot(h, a);
    Node old = a.next;
    Node fresh = new Node();
    a.next = fresh;
    h.putReference(a, fresh, old, HeapHarness.field("next", "Lkioku/persist/heap/Node;"));
    long before = h.stats().usedBytes();
    h.collect();
    // old was reachable only through a.next and a.things[3]: a.things still holds it.
    assertTrue(h.word(old) != 0);
    Object[] things = a.things;
    a.things = null;
    h.putReference(a, null, things, HeapHarness.field("things", "[Ljava/lang/Object;"));
    h.collect();
    assertEquals(0, h.word(old), "a replica the roots no longer reach dies and its object turns white");
    assertTrue(h.stats().usedBytes() < before);
    Node a2 = (Node) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertNull(a2.things);
  }

  @Test
  void recoveredObjectsWhoseReplicasDieTurnWhiteAtTheNextGc() throws Exception {
    SimMedium m = SimMedium.create(0);
    HeapHarness.setRoot(HeapHarness.create(m), graph());
    SimMedium m2 = reopen(m);
    PersistentHeap h = HeapHarness.open(m2);
    Node a = (Node) HeapHarness.recoveredRoot(h);
    Node b = a.next;
    long objects = h.stats().persistentObjects();
    // Recovered objects are listed without a weak reference each; a GC that finds their
    // replicas alive keeps them persistent.
    h.collect();
    assertTrue(h.word(a) != 0 && h.word(b) != 0);
    assertEquals(objects, h.stats().persistentObjects());
    // b is reachable from a.next and a.things[3]: detach it from both, keep it in a local.
    a.next = null;
    h.putReference(a, null, b, HeapHarness.field("next", "Lkioku/persist/heap/Node;"));
    Object[] things = a.things;
    a.things = null;
    h.putReference(a, null, things, HeapHarness.field("things", "[Ljava/lang/Object;"));
    h.collect();
    assertEquals(0, h.word(b), "a recovered object whose replica died turns white");
    assertTrue(h.word(a) != 0, "a recovered object still reachable stays persistent");
    assertTrue(h.stats().persistentObjects() < objects, "the GC stops listing white objects");
    // A white object is an ordinary one: storing into it does not touch the pool, and
    // making it reachable again gives it a new replica.
    b.value = 99;
    h.putPrimitive(b, 99, HeapHarness.field("value", "I"));
    a.next = b;
    h.putReference(a, b, null, HeapHarness.field("next", "Lkioku/persist/heap/Node;"));
    assertTrue(h.word(b) != 0);
    assertTrue(h.verify(a).isEmpty(), h.verify(a).toString());
    Node a2 = (Node) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m2)));
    assertEquals(99, a2.next.value);
    assertNull(a2.things);
  }

  @Test
  void aHeapThatShrankThenChurnsKeepsFewDeadObjectsInMemory() throws Exception {
    // Objects with their own replica word are listed strongly until a GC finds them dead, so
    // a heap far from full must still be collected every few MiB of garbage.
    long bounded = deadKeptAfterChurning(2L << 20);
    long unbounded = deadKeptAfterChurning(Long.MAX_VALUE);
    assertTrue(bounded <= 24 && bounded * 2 < unbounded, "dead objects kept in memory: " + bounded
        + " of 63, against " + unbounded + " when only a heap 90 % full is collected");
  }

  /**
   * Grows a heap to 8 MiB, shrinks it, then churns 8 MiB of objects each replaced by the next;
   * how many of those that died are still in Java memory after a Java GC.
   */
  private static long deadKeptAfterChurning(long garbageBudget) throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m); // 1 MiB chunks
    h.garbageBudgetBytes = garbageBudget;
    Object[] slots = new Object[64];
    HeapHarness.setRoot(h, slots);
    for (int i = 0; i < slots.length; i++) {
      store(h, slots, i, bigNode());
    }
    for (int i = 1; i < slots.length; i++) {
      store(h, slots, i, new Node());
    }
    long gcs = h.stats().gcRuns();
    var churned = new ArrayList<java.lang.ref.WeakReference<Node>>();
    for (int round = 0; round < 64; round++) {
      Node n = bigNode();
      churned.add(new java.lang.ref.WeakReference<>(n));
      store(h, slots, 0, n);
    }
    if (garbageBudget < Long.MAX_VALUE) {
      assertTrue(h.stats().gcRuns() - gcs >= 3, "GCs while churning: " + (h.stats().gcRuns() - gcs));
    }
    Node last = (Node) slots[0];
    System.gc();
    long kept = churned.stream().filter(r -> r.get() != null && r.get() != last).count();
    Object[] again = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertEquals(32_768, ((Node) again[0]).numbers.length);
    assertNull(((Node) again[63]).numbers);
    return kept;
  }

  private static Node bigNode() {
    Node n = new Node();
    n.numbers = new int[32_768]; // 128 KiB
    return n;
  }

  private static void store(PersistentHeap h, Object[] slots, int i, Object value) {
    Object old = slots[i];
    slots[i] = value;
    h.storeReference(slots, i, value, old);
  }

  @Test
  void makingThingsPersistentRunsNoGcUntilAReferenceIsOverwritten() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m); // 1 MiB chunks
    Object[] slots = new Object[64];
    HeapHarness.setRoot(h, slots);
    // Only new replicas, each stored where null was: nothing can die, so no GC marks the heap
    // however often it fills up and grows.
    for (int i = 0; i < slots.length; i++) {
      long[] a = new long[16_384]; // 128 KiB
      slots[i] = a;
      h.storeReference(slots, i, a, null);
    }
    assertTrue(h.stats().capacityBytes() >= 8L << 20, "the heap grew past several chunks");
    assertEquals(0, h.stats().gcRuns());
    // Replacing them makes garbage: the heap collects it instead of growing without end.
    long capacity = h.stats().capacityBytes();
    for (int round = 0; round < 4; round++) {
      for (int i = 0; i < slots.length; i++) {
        long[] a = new long[16_384];
        Object old = slots[i];
        slots[i] = a;
        h.storeReference(slots, i, a, old);
      }
    }
    assertTrue(h.stats().gcRuns() > 0, "replaced replicas are collected");
    assertTrue(h.stats().capacityBytes() < capacity * 3, "the heap stopped growing with its garbage");
    Object[] again = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertEquals(16_384, ((long[]) again[63]).length);
  }

  @Test
  void aGraphOverManyChunksIsRebuiltWholeByTwoThreads() throws Exception {
    // Heap spaces of 1 MiB: the nodes, strings and arrays spread over several, so the two
    // threads of recovery take different chunks, and references cross between them (an
    // object made by one thread and filled by the other).
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    int n = 6000;
    Node[] nodes = new Node[n];
    java.util.Random random = new java.util.Random(13);
    for (int i = 0; i < n; i++) {
      Node x = nodes[i] = new Node();
      x.value = i;
      x.big = random.nextLong();
      x.name = "node " + i;
      x.color = i % 3 == 0 ? Node.Color.RED : Node.Color.GREEN;
      if (i % 500 == 0) x.numbers = new int[60_000 + i]; // spaces fill up between the nodes
    }
    for (int i = 0; i < n; i++) {
      Node x = nodes[i];
      x.next = nodes[(i + 1) % n];
      x.things = new Object[] {nodes[random.nextInt(n)], nodes[(i * 7919) % n].name, i};
    }
    HeapHarness.setRoot(h, nodes);
    // make_persistent wrote each object's check words from the words it copied: they match
    // the replica as the medium holds it.
    java.util.List<String> diffs = h.verify(nodes);
    assertTrue(diffs.isEmpty(), diffs.toString());
    int min = HeapRecovery.parallelMin;
    HeapRecovery.parallelMin = 1;
    Node[] back;
    try {
      back = (Node[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    } finally {
      HeapRecovery.parallelMin = min;
    }
    if (Runtime.getRuntime().availableProcessors() > 1) {
      assertEquals(2, HeapRecovery.lastThreads, "recovery used two threads");
    }
    java.util.IdentityHashMap<Node, Integer> index = new java.util.IdentityHashMap<>();
    for (int i = 0; i < n; i++) index.put(back[i], i);
    assertEquals(n, index.size(), "one object per replica, none made twice");
    for (int i = 0; i < n; i++) {
      Node x = nodes[i];
      Node y = back[i];
      assertEquals(x.value, y.value);
      assertEquals(x.big, y.big);
      assertEquals(x.name, y.name);
      assertSame(x.color, y.color);
      assertSame(back[(i + 1) % n], y.next);
      assertSame(back[index.get(y.things[0])], y.things[0]);
      assertSame(x.things[0], nodes[index.get(y.things[0])]);
      assertSame(back[(i * 7919) % n].name, y.things[1], "a shared string stays shared");
      assertEquals(i, y.things[2]);
      if (x.numbers != null) assertEquals(x.numbers.length, y.numbers.length);
    }
  }

  @Test
  void aFailureOfEitherRecoveryThreadRefusesTheWholeHeap() throws Exception {
    // Damage the check words cannot see (an enum replica's ordinal out of range, its checks
    // recomputed): the marking at open passes it, the fill refuses it, on whichever thread
    // holds its chunk, and the refusal reaches the caller with no thread left behind.
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    int n = 6000;
    Node[] nodes = new Node[n];
    for (int i = 0; i < n; i++) {
      nodes[i] = new Node();
      nodes[i].color = Node.Color.GREEN;
      if (i % 500 == 0) nodes[i].numbers = new int[60_000]; // several chunks
    }
    HeapHarness.setRoot(h, nodes);
    long enumReplica = PersistentHeap.addressOf(h.word(Node.Color.GREEN));
    long size = HeapFormat.HEADER + 8L * (1 + Layout.of(Node.Color.GREEN).slots.length);
    h.space().putLong(enumReplica + HeapFormat.HEADER, 7); // ordinal 7 of a 2-constant enum
    ReplicaCheck.recompute(h.space(), enumReplica, size);
    h.space().flush(enumReplica, size);
    h.space().drain();
    int min = HeapRecovery.parallelMin;
    HeapRecovery.parallelMin = 1;
    try {
      PersistentHeap again = HeapHarness.open(reopen(m));
      HeapException e = assertThrows(HeapException.class, () -> HeapHarness.recoveredRoot(again));
      assertEquals(HeapException.Reason.DAMAGED, e.reason());
      assertTrue(e.getMessage().contains("ordinal 7"), e.getMessage());
      if (Runtime.getRuntime().availableProcessors() > 1) {
        assertEquals(2, HeapRecovery.lastThreads, "recovery used two threads");
      }
    } finally {
      HeapRecovery.parallelMin = min;
    }
    for (Thread t : Thread.getAllStackTraces().keySet()) {
      if (t.getName().equals("kioku-persist recovery")) t.join(10_000);
      assertTrue(!t.getName().equals("kioku-persist recovery") || !t.isAlive(), "helper ended");
    }
  }

  @Test
  void theHeapGrowsPastOneChunk() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    ArrayList<Object> list = new ArrayList<>();
    Object[] big = new Object[3];
    big[0] = new long[200_000]; // 1.6 MB: larger than a 1 MiB chunk
    big[1] = new byte[700_000];
    big[2] = list;
    for (int i = 0; i < 2000; i++) list.add("s" + i);
    // ArrayList is a JDK class: without the agent it cannot be persistent.
    assertThrows(NotPersistableException.class, () -> HeapHarness.setRoot(h, big));
    big[2] = null;
    ((long[]) big[0])[199_999] = 5;
    HeapHarness.setRoot(h, big);
    Object[] b2 = (Object[]) HeapHarness.recoveredRoot(HeapHarness.open(reopen(m)));
    assertEquals(5, ((long[]) b2[0])[199_999]);
    assertEquals(700_000, ((byte[]) b2[1]).length);
  }

  @Test
  void aFailureAtomicSectionIsAllOrNothing() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    Node a = graph();
    HeapHarness.setRoot(h, a);
    int value = HeapHarness.field("value", "I");
    int big = HeapHarness.field("big", "J");
    long start = m.orderingPoints();
    h.atomically(
        () -> {
          a.value = 1;
          h.putPrimitive(a, 1, value);
          a.big = 2;
          h.putPrimitive(a, 2, big);
        });
    long points = m.orderingPoints() - start;
    for (long n = start; n < start + points; n++) {
      SimMedium cut = SimMedium.create(0);
      PersistentHeap hc = HeapHarness.create(cut);
      Node ac = graph();
      HeapHarness.setRoot(hc, ac);
      cut.cutPowerAt(n);
      hc.atomically(
          () -> {
            ac.value = 1;
            hc.putPrimitive(ac, 1, value);
            ac.big = 2;
            hc.putPrimitive(ac, 2, big);
          });
      for (long seed = 0; seed < 16; seed++) {
        SimMedium img = SimMedium.fromImage(cut.crash(CrashMode.random(seed, true, true)));
        Node r = (Node) HeapHarness.recoveredRoot(HeapHarness.open(img));
        boolean old = r.value == -7 && r.big == Long.MIN_VALUE + 3;
        boolean neu = r.value == 1 && r.big == 2;
        assertTrue(old || neu, "cut at " + n + " seed " + seed + ": value " + r.value + " big " + r.big);
      }
    }
  }
}
