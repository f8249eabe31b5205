package kioku.persist.heap;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.lang.ref.WeakReference;
import java.util.function.Consumer;
import kioku.persist.rt.Barrier;
import kioku.persist.rt.IdentityHashes;

/**
 * The replica words of persistent objects, by identity, held weakly: the only place a JDK
 * object or an array can keep one, and the registry of every persistent object (application
 * objects too: weakly those made persistent in this run, strongly those recovery rebuilt) that
 * the persistent-heap GC walks to turn objects white when their replicas die. Lookups are
 * lock-free (open addressing on identityHashCode over an immutable-size table); insertions and
 * resizes take the table's lock.
 */
final class SideTable {
  /** An entry: the object (weakly), its identity hash and its replica word. */
  static final class Entry extends WeakReference<Object> {
    final int hash;
    volatile long word;

    Entry(Object o, int hash, long word) {
      super(o);
      this.hash = hash;
      this.word = word;
    }
  }

  private static final VarHandle WORD;

  static {
    try {
      WORD = MethodHandles.lookup().findVarHandle(Entry.class, "word", long.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /**
   * One generation of the table: identity hashes beside the entries, so a probe that misses
   * (the common case: most objects written are not persistent) reads only the int array.
   */
  private static final class Slots {
    final int[] hashes;
    final Entry[] entries;
    final int shift;
    /**
     * One bit per identity hash value modulo its size, set for every entry: a store into an
     * object that is not persistent usually ends on one bit of this small array instead of
     * a probe of the big ones.
     */
    final long[] filter;

    Slots(int capacity) {
      hashes = new int[capacity];
      entries = new Entry[capacity];
      shift = 32 - Integer.numberOfTrailingZeros(capacity);
      filter = new long[Math.max(1, capacity / 16)]; // 4 bits per slot, 8 per entry at most
    }

    boolean mayContain(int h) {
      long[] f = filter;
      return (f[(h >>> 6) & (f.length - 1)] & (1L << h)) != 0;
    }

    void note(int h) {
      long[] f = filter;
      f[(h >>> 6) & (f.length - 1)] |= 1L << h;
    }

    /** Fibonacci hashing: the high bits of the product, so every bit of h counts. */
    int home(int h) {
      return (h * 0x9E3779B9) >>> shift;
    }
  }

  /**
   * Whether instances of a class may be written by retransformed JDK code: the class has a
   * superclass other than Object from the boot loader (an application subclass of a JDK
   * collection, say). JDK code's store sites do not test for instrumented objects: they go by
   * the identity hash, as for JDK objects (see agent.BarrierMethodAdapter#isPersistentType).
   */
  private static final ClassValue<Boolean> JDK_WRITTEN =
      new ClassValue<>() {
        @Override
        protected Boolean computeValue(Class<?> c) {
          for (Class<?> k = c.getSuperclass(); k != null && k != Object.class; k = k.getSuperclass()) {
            if (k.getClassLoader() == null) return true;
          }
          return false;
        }
      };

  /**
   * Gives {@code o}, an instrumented object about to get a replica word, an identity hash if
   * JDK code may write it, so that the barrier of a JDK store site (which reads only the hash)
   * sends its stores to the runtime. Called before the word is set: a writer that finds no
   * hash read the header before the word was set, as for any JDK object (see {@link #add}).
   */
  static void hashIfJdkWritten(Object o) {
    Class<?> c = o.getClass();
    LastClass last = lastClass; // recovery adopts millions of objects of a few classes in a row
    if (last == null || last.c != c) lastClass = last = new LastClass(c, JDK_WRITTEN.get(c));
    if (last.jdkWritten) System.identityHashCode(o);
  }

  private static final class LastClass {
    final Class<?> c;
    final boolean jdkWritten;

    LastClass(Class<?> c, boolean jdkWritten) {
      this.c = c;
      this.jdkWritten = jdkWritten;
    }
  }

  private static LastClass lastClass;

  private volatile Slots slots = new Slots(1024);
  private int used; // entries in the table, live or cleared (a rebuild drops the cleared)

  /**
   * The entry of {@code o}, or null. An object without an identity hash has none (every entry
   * was made with one), which is answered without giving it a hash.
   */
  Entry find(Object o) {
    int peeked = IdentityHashes.peek(o);
    if (peeked == 0) return null;
    Slots t = slots;
    int mask = t.hashes.length - 1;
    int h = peeked | 1; // 0 marks an empty slot
    if (!t.mayContain(h)) return null;
    for (int i = t.home(h); ; i = (i + 1) & mask) {
      int x = t.hashes[i];
      if (x == 0) return null;
      if (x == h) {
        Entry e = t.entries[i];
        if (e != null && e.get() == o) return e;
      }
    }
  }

  long word(Object o) {
    Entry e = find(o);
    return e == null ? 0 : e.word;
  }

  /** The entry of {@code o}, created (with word 0) if absent. */
  synchronized Entry entry(Object o) {
    Entry e = find(o);
    return e != null ? e : add(o);
  }

  /**
   * Adds an entry for an object known to have none (recovery's fresh objects). Every entry is
   * made here, with word 0: the barrier's class filter lets o's class pass first, and if that
   * changed the filter, every thread passes a safepoint before o can get a word (see
   * Barrier.addSideClass).
   */
  synchronized Entry add(Object o) {
    if (Barrier.addSideClass(o.getClass())) Safepoint.force();
    if ((used + 1) * 2 > slots.hashes.length) rebuild();
    Entry e = new Entry(o, System.identityHashCode(o) | 1, 0);
    insert(slots, e);
    used++;
    return e;
  }

  static boolean cas(Entry e, long expect, long update) {
    return WORD.compareAndSet(e, expect, update);
  }

  /**
   * Application objects keep their replica word in their own field; the table only has to
   * list them for the GC, which needs no lookup: an append-only array of weak references.
   */
  private WeakReference<Object>[] registered = newRefs(1024);

  private int registeredCount;

  @SuppressWarnings("unchecked")
  private static WeakReference<Object>[] newRefs(int n) {
    return (WeakReference<Object>[]) new WeakReference<?>[n];
  }

  /**
   * Lists those of {@code objects[0..n)} (a make_persistent's copied objects) that keep their
   * own word, strongly, as recovery lists the objects it rebuilds ({@link #recovered}: the
   * same argument holds, since a make_persistent's objects are reachable from the object or
   * root it was stored into) instead of a weak reference each, which cost 32 bytes and work
   * in every collection of the Java heap (a fifth of make_persistent's CPU for 1 GB of small
   * objects). The price: an object whose replica died stays in memory until the next
   * persistent GC drops it, as its replica stays in the pool until then.
   */
  void registerAll(Object[] objects, int n) {
    synchronized (this) {
      int k = 0;
      for (int i = 0; i < n; i++) if (objects[i] instanceof kioku.persist.rt.Persistent) k++;
      if (k == 0) return;
      if (recoveredCount + k > recovered.length) {
        recovered = java.util.Arrays.copyOf(recovered, Math.max(recoveredCount + k, recovered.length * 2));
      }
      for (int i = 0; i < n; i++) {
        if (objects[i] instanceof kioku.persist.rt.Persistent) recovered[recoveredCount++] = objects[i];
      }
    }
  }

  /** Lists an object that keeps its own replica word (an instrumented class). */
  synchronized void register(Object o) {
    if (registeredCount == registered.length) makeRoom();
    registered[registeredCount++] = new WeakReference<>(o);
  }

  /** The list of weak references is full: drops the dead, and grows it if still half full. */
  private void makeRoom() {
    int n = 0;
    for (int i = 0; i < registeredCount; i++) {
      if (registered[i].get() != null) registered[n++] = registered[i];
    }
    java.util.Arrays.fill(registered, n, registeredCount, null);
    registeredCount = n;
    if (n * 2 > registered.length) registered = java.util.Arrays.copyOf(registered, registered.length * 2);
  }

  /**
   * Recovered objects, and those make_persistent copied ({@link #registerAll}), that keep their
   * own replica word, held strongly: 4 bytes each instead of
   * a weak reference (32 bytes, and work for every collection of the Java heap that finds it).
   * Holding them costs no memory the program would otherwise get back: a recovered object
   * whose replica is live is reachable from a root in the pool, hence (the objects mirror
   * their replicas) from the root's static field. One whose replica dies is dropped by the
   * next persistent GC ({@link #dropWhite}), which also turns it white; until then it stays
   * in memory as its replica stays in the pool.
   */
  private Object[] recovered = new Object[0];

  private int recoveredCount;

  /**
   * Lists recovered objects that keep their own replica word (see {@link #recovered}): {@code
   * objects[0..n)}, nulls after. Takes the array itself when nothing is listed yet (a recovery:
   * one array of millions fewer), so the caller must not use it again.
   */
  synchronized void listRecovered(Object[] objects, int n) {
    if (recoveredCount == 0) {
      recovered = objects;
      recoveredCount = n;
      return;
    }
    if (recoveredCount + n > recovered.length) {
      recovered = java.util.Arrays.copyOf(recovered, recoveredCount + n);
    }
    System.arraycopy(objects, 0, recovered, recoveredCount, n);
    recoveredCount += n;
  }

  /** Drops the recovered objects that are white now (after a GC turned them white). */
  synchronized void dropWhite(java.util.function.ToLongFunction<Object> word) {
    int n = 0;
    for (int i = 0; i < recoveredCount; i++) {
      Object o = recovered[i];
      if (word.applyAsLong(o) != 0) recovered[n++] = o;
    }
    if (n < recovered.length / 2) {
      recovered = java.util.Arrays.copyOf(recovered, n);
    } else {
      java.util.Arrays.fill(recovered, n, recoveredCount, null);
    }
    recoveredCount = n;
  }

  /** Forgets every listed recovered object (the heap is closed). */
  synchronized void clearRecovered() {
    recovered = new Object[0];
    recoveredCount = 0;
  }

  /** Every listed object still alive: the table's, the registered ones, the recovered ones. */
  void forEachLive(Consumer<Object> action) {
    for (Entry e : slots.entries) {
      Object o = e == null ? null : e.get();
      if (o != null) action.accept(o);
    }
    WeakReference<Object>[] r;
    int n;
    synchronized (this) {
      r = registered;
      n = registeredCount;
    }
    for (int i = 0; i < n; i++) {
      Object o = r[i].get();
      if (o != null) action.accept(o);
    }
    Object[] rec;
    synchronized (this) {
      rec = recovered;
      n = recoveredCount;
    }
    for (int i = 0; i < n; i++) action.accept(rec[i]);
  }

  /** Objects listed, including some that died since the last rebuild (for statistics). */
  synchronized int size() {
    return used + registeredCount + recoveredCount;
  }

  private void rebuild() {
    int alive = 0;
    for (Entry e : slots.entries) if (e != null && e.get() != null) alive++;
    rebuildTo(Integer.highestOneBit(Math.max(1024, alive * 4 + 4)));
  }

  private void rebuildTo(int want) {
    Slots old = slots;
    Slots t = new Slots(want);
    int n = 0;
    for (Entry e : old.entries) {
      if (e != null && e.get() != null) {
        insert(t, e);
        n++;
      }
    }
    used = n;
    slots = t;
  }

  /** Entry first, then its hash: a reader that sees the hash finds the entry. */
  private static void insert(Slots t, Entry e) {
    int mask = t.hashes.length - 1;
    int i = t.home(e.hash);
    while (t.hashes[i] != 0) i = (i + 1) & mask;
    t.entries[i] = e;
    t.note(e.hash); // before the hash: a reader that finds the hash also passes the filter
    VarHandle.storeStoreFence();
    t.hashes[i] = e.hash;
  }
}
