package kioku.persist.heap;

import java.lang.invoke.VarHandle;
import java.lang.ref.Reference;
import java.lang.reflect.Array;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.zip.CRC32C;
import kioku.persist.DurableRoot;
import kioku.persist.NotPersistableException;
import kioku.persist.PersistenceException;
import kioku.persist.pool.Medium;
import kioku.persist.pool.Pool;
import kioku.persist.pool.PoolException;
import kioku.persist.pool.Section;
import kioku.persist.rt.Barrier;
import kioku.persist.rt.FieldIds;
import kioku.persist.rt.Hooks;
import kioku.persist.rt.Persistent;

/**
 * A Java persistent heap in a kioku pool: RBP's replicas, make_persistent, the double-update
 * barrier's slow paths, recovery and GC. Every object reachable from a durable root has a
 * replica here; a replica becomes reachable (from a root or another replica) only after it is
 * durable, so whatever a crash leaves, the roots lead to complete replicas.
 *
 * <p>Every store into a replica word also updates the replica's two check words
 * ({@link ReplicaCheck}) under the replica's stripe lock ({@link ReplicaLocks}); stores inside a
 * failure-atomic section are logged first ({@link Sections}).
 *
 * <p>Locking, outermost first: the heap lock, shared ({@link #shared}: making objects
 * persistent, storing a reference or a root) or exclusive ({@link #lock}: GC, recovery, a
 * class's roots declared, close); a section's own lock, a replica stripe, the section group
 * lock, the pool lock (growing the pool); the monitors of the allocator, the side table, the
 * class and root tables and {@link #groups} are leaves. Primitive stores take no heap lock; the
 * GC waits them out through {@link WriterEpochs} before it frees anything.
 *
 * <p>make_persistent calls of different threads run at once, each the thesis's responsible
 * thread for the objects it shades ({@link Shading}): its own heap segments, its own copies and
 * flushes. While an object is being copied, and until its whole group is durable, its replica
 * word carries {@link #GREY}; writers of it wait ({@link #awaitCopied}), and a make_persistent
 * that meets it joins its group. The copier sets the check words once the copy is final.
 */
public final class PersistentHeap implements Hooks, Sections.DramUndo, AutoCloseable {
  /** The pool kind tag of a Java persistent heap. */
  public static final String POOL_KIND = HeapFormat.KIND;

  /** Blocks of undo log a new heap starts with, and their size. */
  static final int DEFAULT_LOG_BLOCKS = 8;

  static final long DEFAULT_LOG_BLOCK_BYTES = 1L << 20;

  /** How long a section waits for others it depends on before they commit as they stand. */
  static final long DEFAULT_ISOLATION_WAIT_MILLIS = 1000;

  /**
   * Creation settings ({@code logSlots} blocks of {@code logSlotBytes} to start with; logs grow
   * past them on any pool) and how long isolation waits.
   */
  public record Options(long chunkBytes, int logSlots, long logSlotBytes, long isolationWaitMillis) {
    public Options(long chunkBytes, int logSlots, long logSlotBytes) {
      this(chunkBytes, logSlots, logSlotBytes, DEFAULT_ISOLATION_WAIT_MILLIS);
    }

    public static Options defaults() {
      return new Options(HeapFormat.DEFAULT_CHUNK, DEFAULT_LOG_BLOCKS, DEFAULT_LOG_BLOCK_BYTES);
    }
  }

  /** Numbers for tests, benchmarks and {@code KiokuPersist.stats()}. */
  public record Stats(
      long persistentObjects,
      long usedBytes,
      long capacityBytes,
      int classes,
      long gcRuns,
      long repairedAtOpen,
      int logBlocks,
      int earlyCommits) {}

  private final Pool pool;
  private final Medium medium;
  private final HeapSpace space;
  private final Allocator alloc = new Allocator();
  private final ClassTable classes;
  private final RootTable roots;
  private final LogSpace logSpace;
  private final Sections sections;
  private final SideTable side = new SideTable();
  private final WriterEpochs epochs = new WriterEpochs();
  private final ReplicaLocks replicaLocks = new ReplicaLocks();
  /** {@link Medium#durableInStoreOrder}, read once. */
  private final boolean durableInStoreOrder;
  private final ReentrantReadWriteLock heapLock = new ReentrantReadWriteLock();
  /** The heap alone: GC, recovery, a class's roots declared, close, statistics. */
  private final ReentrantReadWriteLock.WriteLock lock = heapLock.writeLock();
  /**
   * Shared: make_persistent and the stores that may call it (references, roots), which run at
   * once in different threads (see {@link Shading}).
   */
  private final ReentrantReadWriteLock.ReadLock shared = heapLock.readLock();
  private final Object poolLock = new Object();
  private final long chunkBytes;
  /** Heap spaces added by {@link #grow} (guarded by poolLock; read before allocating). */
  private volatile int growths;
  private final Set<String> readyRootClasses = new HashSet<>();
  private final RootNames rootNames;
  /** The heap's live replicas at open while its objects are still to be rebuilt. */
  private Marks marksAtOpen;

  private volatile boolean recoveredBuilt;
  /** Recovery is running (or moving objects to new replicas): no second recovery, no GC. */
  private boolean recovering;
  private Map<String, Object> recoveredRoots = Map.of();
  private long gcRuns;
  private volatile long liveAtLastGc;
  /**
   * Replicas may have died since the last GC: a reference in the pool (a replica's word or a
   * root) that pointed somewhere was overwritten, or replicas were abandoned (objects moved to
   * new replicas). Without it, making things persistent only adds live replicas, and a GC would
   * mark the whole heap to find nothing.
   */
  private volatile boolean mayHoldGarbage;
  private volatile int rollbacksAtLastGc;
  private long repairedAtOpen;
  private boolean closed;

  private PersistentHeap(Pool pool, long chunkBytes, Section meta, Section cls, long logBlockBytes,
      int logBlocks, long isolationWaitMillis, RootNames rootNames) {
    this.pool = pool;
    this.medium = pool.medium();
    this.space = new HeapSpace(medium);
    this.durableInStoreOrder = medium.durableInStoreOrder();
    this.chunkBytes = chunkBytes;
    this.classes = new ClassTable(medium, meta.offset(), cls.offset(), cls.length());
    this.roots = new RootTable(medium, meta.offset());
    this.logSpace = new LogSpace(medium, pool, poolLock, logBlockBytes, logBlocks);
    this.sections = new Sections(logSpace, space, replicaLocks, this, isolationWaitMillis);
    this.rootNames = rootNames;
    space.map(0, meta.offset(), meta.length());
  }

  /** Makes a new heap in an empty pool of kind {@link HeapFormat#KIND}. */
  public static PersistentHeap create(Pool pool, Options o) throws HeapException {
    return create(pool, o, RootNames.NONE);
  }

  /** As {@link #create(Pool, Options)}, with the program's root renames. */
  public static PersistentHeap create(Pool pool, Options o, RootNames names) throws HeapException {
    checkKind(pool);
    if (!pool.sections().isEmpty()) {
      throw new HeapException(
          HeapException.Reason.WRONG_POOL,
          "pool " + pool.path() + " already holds sections: open it instead of creating a heap");
    }
    if (o.logSlots < 1 || o.logSlotBytes < LogSpace.HEADER + 16L * LogSpace.ENTRY
        || o.logSlotBytes > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          "logSlots=" + o.logSlots + ", logSlotBytes=" + o.logSlotBytes
              + ": use at least one block of at least 1k (and under 2g)");
    }
    try {
      Section meta = pool.addSection(HeapFormat.META, HeapFormat.META_LEN, 0);
      Section cls = pool.addSection(HeapFormat.CLASSES, HeapFormat.CLASSES_LEN, 0);
      pool.addSection(HeapFormat.LOG, o.logSlots * o.logSlotBytes, 0);
      Section heap0 = pool.addSection(HeapFormat.HEAP_PREFIX + 0, o.chunkBytes, 0);
      Medium m = pool.medium();
      long b = meta.offset();
      m.putLong(b + HeapFormat.M_MAGIC, HeapFormat.MAGIC);
      m.putInt(b + HeapFormat.M_VERSION, HeapFormat.VERSION);
      m.putInt(b + HeapFormat.M_SEGMENT, SizeClasses.SEGMENT);
      m.putLong(b + HeapFormat.M_CHUNK, o.chunkBytes);
      m.putLong(b + HeapFormat.M_CLASS_COUNT, HeapFormat.countWord(0));
      m.putLong(b + HeapFormat.M_ROOT_COUNT, HeapFormat.countWord(0));
      m.putInt(b + HeapFormat.M_LOG_SLOTS, o.logSlots);
      m.putInt(b + HeapFormat.M_LOG_SLOT_BYTES, (int) o.logSlotBytes);
      m.putInt(b + HeapFormat.M_CRC, metaCrc(m, b));
      m.persist(b, 64);
      pool.commit(new long[] {HeapFormat.VERSION});
      PersistentHeap h = new PersistentHeap(pool, o.chunkBytes, meta, cls, o.logSlotBytes,
          o.logSlots, o.isolationWaitMillis, names);
      h.logSpace.mapAreas();
      h.space.map(1, heap0.offset(), heap0.length());
      h.alloc.addChunk(1, heap0.length());
      return h;
    } catch (PoolException e) {
      throw new HeapException(HeapException.Reason.POOL, e.getMessage(), e);
    }
  }

  /** CRC-32C of the meta fields written once: bytes 0..24 and 40..48. */
  private static int metaCrc(Medium m, long b) {
    byte[] bytes = new byte[32];
    m.get(b, bytes, 0, 24);
    m.get(b + HeapFormat.M_LOG_SLOTS, bytes, 24, 8);
    CRC32C c = new CRC32C();
    c.update(bytes);
    return (int) c.getValue();
  }

  /** Opens the heap of a pool: checks it, rolls back interrupted failure-atomic sections. */
  public static PersistentHeap open(Pool pool) throws HeapException {
    return open(pool, Options.defaults().isolationWaitMillis, RootNames.NONE);
  }

  /**
   * Opens the heap of a pool: checks its metadata, rolls back the failure-atomic sections a
   * crash interrupted, then checks (and where one word is wrong, repairs) every replica the
   * roots reach. Nothing of the program runs before; a damaged heap is refused.
   */
  public static PersistentHeap open(Pool pool, long isolationWaitMillis, RootNames names)
      throws HeapException {
    checkKind(pool);
    Section meta = need(pool, HeapFormat.META);
    Section cls = need(pool, HeapFormat.CLASSES);
    need(pool, HeapFormat.LOG);
    Medium m = pool.medium();
    long b = meta.offset();
    if (m.getLong(b + HeapFormat.M_MAGIC) != HeapFormat.MAGIC) {
      throw new HeapException(
          HeapException.Reason.DAMAGED,
          "pool " + pool.path() + ": persist.meta has no heap header; restore the pool from a backup");
    }
    int version = m.getInt(b + HeapFormat.M_VERSION);
    if (version != HeapFormat.VERSION) {
      throw new HeapException(
          HeapException.Reason.WRONG_POOL,
          "pool " + pool.path() + " holds a heap of layout version " + version
              + "; this kioku-persist reads version " + HeapFormat.VERSION + ": use a matching release");
    }
    if (m.getInt(b + HeapFormat.M_CRC) != metaCrc(m, b)) {
      throw new HeapException(
          HeapException.Reason.DAMAGED,
          "persistent heap damaged: the persist.meta header does not check; restore the pool"
              + " from a backup");
    }
    long chunk = m.getLong(b + HeapFormat.M_CHUNK);
    int logBlocks = m.getInt(b + HeapFormat.M_LOG_SLOTS);
    long logBlockBytes = m.getInt(b + HeapFormat.M_LOG_SLOT_BYTES) & 0xffffffffL;
    PersistentHeap h = new PersistentHeap(pool, chunk, meta, cls, logBlockBytes, logBlocks,
        isolationWaitMillis, names);
    for (int i = 0; ; i++) {
      Optional<Section> s = pool.section(HeapFormat.HEAP_PREFIX + i);
      if (s.isEmpty()) break;
      h.space.map(i + 1, s.get().offset(), s.get().length());
      h.alloc.addChunk(i + 1, s.get().length());
    }
    h.classes.load();
    h.logSpace.mapAreas();
    // (1) Undo what a crash interrupted; (2) check the roots and every replica they reach,
    // recomputing the checks of those the undo changed; (3) only then end the undone logs.
    Sections.Undone undone = Sections.rollBackAtOpen(h.logSpace, h.space);
    h.roots.load();
    h.lock.lock();
    try {
      Marks live = h.markLive(undone.touched());
      Sections.endAtOpen(h.logSpace, h.space, undone);
      h.rootNames.apply(h);
      if (h.rootNames.changedRoots()) {
        live = h.markLive();
        h.rebuildAllocator(live);
      }
      // Recovery needs the program's classes, so it waits for the first use of the heap;
      // nothing changes the heap before it (see ensureRecovered).
      h.marksAtOpen = h.hasData() ? live : null;
    } finally {
      h.lock.unlock();
    }
    return h;
  }

  private static void checkKind(Pool pool) throws HeapException {
    if (!HeapFormat.KIND.equals(pool.kind())) {
      throw new HeapException(
          HeapException.Reason.WRONG_POOL,
          "pool " + pool.path() + " holds '" + pool.kind() + "', not a Java persistent heap ("
              + HeapFormat.KIND + "): give another pool path");
    }
  }

  private static Section need(Pool pool, String name) throws HeapException {
    return pool.section(name)
        .orElseThrow(
            () ->
                new HeapException(
                    HeapException.Reason.DAMAGED,
                    "pool " + pool.path() + " has no section " + name
                        + ": it is not a complete Java heap; restore it from a backup"));
  }

  public Pool pool() {
    return pool;
  }

  /** The replica stripes (for tests of their ownership). */
  ReplicaLocks replicaLocks() {
    return replicaLocks;
  }

  HeapSpace space() {
    return space;
  }

  RootTable rootTable() {
    return roots;
  }

  // ---------------------------------------------------------------- replica words

  private static final long LOCK_BIT = 1L;
  /**
   * The object is being copied by make_persistent, or its replica is not durable yet: writers
   * wait ({@link #awaitCopied}) until its group has published it.
   */
  private static final long GREY = 2L;

  private static final ClassValue<Long> WORD_OFFSET =
      new ClassValue<>() {
        @Override
        protected Long computeValue(Class<?> c) {
          for (Class<?> k = c; k != null; k = k.getSuperclass()) {
            try {
              return Unsafes.fieldOffset(k.getDeclaredField("$kioku$r"));
            } catch (NoSuchFieldException e) {
              // declared higher up
            }
          }
          throw new IllegalStateException(c.getName() + " has no replica word");
        }
      };

  /** The replica word of any object (0: white). */
  long word(Object o) {
    if (o instanceof Persistent) return ((Persistent) o).$kioku$r();
    return side.word(o);
  }

  static long addressOf(long word) {
    return word & ~7L;
  }

  /** Compare-and-set of a replica word. */
  private boolean casWord(Object o, long expect, long update) {
    if (o instanceof Persistent) {
      return Unsafes.U.compareAndSwapLong(o, WORD_OFFSET.get(o.getClass()), expect, update);
    }
    SideTable.Entry e = expect == 0 ? side.entry(o) : side.find(o);
    return e != null && SideTable.cas(e, expect, update);
  }

  /** Sets the word of a white object (lock held) and lists it for the GC. */
  private void setWord(Object o, long word) {
    boolean set;
    if (o instanceof Persistent) {
      SideTable.hashIfJdkWritten(o);
      set = casWord(o, 0, word);
      side.register(o);
    } else {
      set = SideTable.cas(side.entry(o), 0, word);
    }
    if (!set) throw new IllegalStateException("replica word changed under the heap lock");
  }

  /** Clears a word whose replica dies (spins while a volatile writer holds the object). */
  private void clearWord(Object o) {
    while (true) {
      long w = word(o);
      if (w == 0) return;
      if ((w & LOCK_BIT) == 0 && casWord(o, w, 0)) return;
      Thread.onSpinWait();
    }
  }

  /** Ends an object's copy: its replica is final and durable, writers may go on. */
  private void clearGrey(Object o) {
    while (true) {
      long w = word(o);
      if ((w & GREY) == 0 || casWord(o, w, w & ~GREY)) return;
    }
  }

  /** The replica word, read with volatile semantics (after another thread's compare-and-set). */
  private long wordVolatile(Object o) {
    if (o instanceof Persistent) return Unsafes.U.getLongVolatile(o, WORD_OFFSET.get(o.getClass()));
    return side.word(o); // a volatile field
  }

  /**
   * Waits until the make_persistent that shaded o has published it (its whole group durable)
   * or given up on it; o's word then (0: white). The caller holds no lock a make_persistent
   * needs: they need none but the shared heap lock, which waiting for the exclusive one does
   * not take from them.
   */
  private long awaitCopied(Object o) {
    for (int spins = 0; ; spins++) {
      long w = wordVolatile(o);
      if ((w & GREY) == 0) return w;
      backOff(spins);
    }
  }

  /** Waiting for another thread: spin briefly, then yield, then sleep (it may need this CPU). */
  private static void backOff(int tries) {
    if (tries < 64) {
      Thread.onSpinWait();
    } else if (tries < 128) {
      Thread.yield();
    } else {
      java.util.concurrent.locks.LockSupport.parkNanos(20_000);
    }
  }

  // ---------------------------------------------------------------- make_persistent

  /**
   * One make_persistent call, the thesis's responsible thread: the grey objects it shaded in
   * shading order (which is also the work list), their replicas, and its thread's segments of
   * the heap ({@link Allocator.SlotCache}: no other thread allocates in them, so a grey
   * replica's address names the call responsible for it). Calls that meet each other's grey
   * objects form a group (union-find under {@link #groups}: {@link #parent}; at a root, the
   * members not yet durable and whether one failed); each returns only when every member's
   * replicas are durable. Plain arrays, not JDK collections: those are instrumented, and every
   * call would cost a barrier lookup.
   */
  private static final class Shading {
    Object[] objects = new Object[4];
    long[] addrs = new long[4];
    long[] sizes = new long[4];
    boolean[] canonical = new boolean[4];
    int count;
    int next; // objects[next..count) are still to copy
    final Allocator.SlotCache space;
    /** Union-find over groups; guarded by {@link PersistentHeap#groups}. */
    Shading parent = this;
    /** At a root: members whose replicas are not durable yet. */
    int active = 1;
    /** At a root: a member failed (refused object, heap full); every member rolls back. */
    boolean failed;
    /** At a root: members that have not yet published (or turned white) their objects. */
    int unpublished = 1;
    /** Its group ended with this call its only member: nothing to wait for after publishing. */
    boolean alone;

    Shading(Allocator.SlotCache space) {
      this.space = space;
    }

    void add(Object o, long addr, long size, boolean isCanonical) {
      if (count == objects.length) {
        objects = java.util.Arrays.copyOf(objects, count * 2);
        addrs = java.util.Arrays.copyOf(addrs, count * 2);
        sizes = java.util.Arrays.copyOf(sizes, count * 2);
        canonical = java.util.Arrays.copyOf(canonical, count * 2);
      }
      objects[count] = o;
      addrs[count] = addr;
      sizes[count] = size;
      canonical[count] = isCanonical;
      count++;
    }
  }

  /** Each thread's heap segments, kept from one make_persistent to the next. */
  private final ThreadLocal<Allocator.SlotCache> slotCaches =
      ThreadLocal.withInitial(() -> new Allocator.SlotCache(alloc));

  /** Guards every {@link Shading}'s union-find fields; waited on for a group's end. */
  private final Object groups = new Object();

  /** Groups joined (a make_persistent met another's grey object): statistics, tests. */
  private long groupJoins;

  /**
   * Test probe: told of every object a make_persistent shades, and when it has copied and
   * flushed its part and waits for its group. Null outside tests.
   */
  interface PersistProbe {
    void shaded(Object o);

    void waiting();
  }

  static volatile PersistProbe probe;

  /**
   * Turns the barrier on. A writer that read it off has its store visible after the
   * safepoint; writers fence from here on until WriterFences lets them stop.
   */
  private void activate() {
    if (Barrier.active) return;
    synchronized (groups) {
      if (!Barrier.active) {
        Barrier.fenced = true;
        Barrier.hooks = this;
        Barrier.active = true;
        Safepoint.force();
        WriterFences.activated();
      }
    }
  }

  /**
   * make_persistent: gives {@code v} and everything it reaches a durable replica and returns
   * the address of v's. The heap lock held, shared or exclusive: calls of different threads run
   * at once (see {@link Shading}).
   */
  long persist(Object v) {
    long w = word(v);
    if (w != 0 && (w & GREY) == 0) return addressOf(w);
    if (lock.isHeldByCurrentThread()) {
      ensureRecovered(Thread.currentThread().getContextClassLoader());
      activate();
      maybeCollect();
    } else {
      // The shared holder's lockShared did the rest (recovery, GC: they need the heap alone).
      activate();
    }
    WriterFences.begin();
    try {
      while (true) {
        long addr = persistFenced(v);
        if (addr != 0) return addr;
        // Another member of the group failed, not this one: its objects are white again.
      }
    } finally {
      WriterFences.end();
    }
  }

  /**
   * make_persistent proper, while every writer fences (see WriterFences): this thread's part,
   * then the group's end. Returns 0 if the group failed because of another member (try again).
   */
  private long persistFenced(Object v) {
    Allocator.SlotCache cache = slotCaches.get();
    boolean nested = cache.current != null; // a make_persistent inside one: its own segments
    if (nested) cache = new Allocator.SlotCache(alloc);
    Shading s = new Shading(cache);
    cache.beginCall(s);
    Throwable failure = null;
    long addr = 0;
    try {
      addr = shade(v, s);
      while (s.next < s.count) {
        int i = s.next++;
        copy(s.objects[i], s.addrs[i], s.canonical[i], s);
      }
      for (int i = 0; i < s.count; i++) {
        ReplicaCheck.recompute(space, s.addrs[i], s.sizes[i]);
        space.flush(s.addrs[i], s.sizes[i]);
      }
      space.drain();
    } catch (RuntimeException | HeapException | Error e) {
      // Even an Error (out of memory) ends this part: the group's other members wait for it.
      failure = e;
    }
    PersistProbe p = probe;
    if (p != null) p.waiting();
    if (groupEnd(s, failure != null)) {
      // Every member's replicas are durable with their checks: publish (writers may go on),
      // and return once every member has (what this call returns reaches theirs too).
      side.registerAll(s.objects, s.count);
      for (int i = 0; i < s.count; i++) clearGrey(s.objects[i]);
      groupPublished(s);
      endCall(cache, nested);
      return addr;
    }
    // Nothing published them: turn the grey objects white again and free their space.
    for (int i = 0; i < s.count; i++) clearWord(s.objects[i]);
    groupPublished(s);
    epochs.awaitGracePeriod();
    for (int i = 0; i < s.count; i++) cache.unallocate(s.addrs[i], s.sizes[i]);
    endCall(cache, nested);
    if (failure == null) return 0;
    if (failure instanceof RuntimeException re) throw re;
    if (failure instanceof Error err) throw err;
    throw new PersistenceException(failure.getMessage(), failure);
  }

  private static void endCall(Allocator.SlotCache cache, boolean nested) {
    if (nested) {
      cache.releaseAll();
    } else {
      cache.endCall();
    }
  }

  private static Shading find(Shading s) {
    while (s.parent != s) {
      s.parent = s.parent.parent;
      s = s.parent;
    }
    return s;
  }

  /**
   * Ends this call's part of its group: waits until every member's replicas are durable (or
   * one failed). True if none failed. Members only ever wait here, after their copy, and a copy
   * never waits for a member: no cycle of waits, whatever order the graphs reach each other in.
   */
  private boolean groupEnd(Shading s, boolean failed) {
    boolean interrupted = false;
    try {
      synchronized (groups) {
        Shading r = find(s);
        if (failed) r.failed = true;
        if (--r.active == 0) {
          // Nobody joins a group whose copies are done: alone now, alone to the end.
          s.alone = r == s && r.unpublished == 1;
          if (!s.alone) groups.notifyAll();
        }
        while ((r = find(s)).active > 0) {
          try {
            groups.wait();
          } catch (InterruptedException e) {
            interrupted = true; // the group needs this thread's replicas: keep waiting
          }
        }
        return !r.failed;
      }
    } finally {
      if (interrupted) Thread.currentThread().interrupt();
    }
  }

  /**
   * After {@link #groupEnd}: this member has published its objects (or turned them white);
   * waits until every member has, so that no member returns while another's objects are still
   * grey. No member can join any more (the group's copies are all done).
   */
  private void groupPublished(Shading s) {
    if (s.alone) return;
    boolean interrupted = false;
    try {
      synchronized (groups) {
        Shading r = find(s);
        if (--r.unpublished == 0) groups.notifyAll();
        while (find(s).unpublished > 0) {
          try {
            groups.wait();
          } catch (InterruptedException e) {
            interrupted = true;
          }
        }
      }
    } finally {
      if (interrupted) Thread.currentThread().interrupt();
    }
  }

  /** What {@link #join} found. */
  private enum Joined { JOINED, DURABLE, FAILED }

  /** Joins {@code s}'s group with {@code other}'s, unless that one has ended. */
  private Joined join(Shading s, Shading other) {
    synchronized (groups) {
      Shading a = find(s);
      Shading b = find(other);
      if (a == b) return Joined.JOINED;
      if (b.active == 0) return b.failed ? Joined.FAILED : Joined.DURABLE;
      b.parent = a;
      a.active += b.active;
      a.unpublished += b.unpublished;
      a.failed |= b.failed;
      groupJoins++;
      return Joined.JOINED;
    }
  }

  /** Joins of make_persistent groups so far (tests, statistics). */
  public long groupJoins() {
    synchronized (groups) {
      return groupJoins;
    }
  }

  /**
   * v is grey at {@code addr}, shaded by another make_persistent: joins its group (so this
   * call returns only once that replica is durable) and returns addr, or returns 0 if v's
   * word changed meanwhile (the caller looks again).
   */
  private long meetGrey(Object v, long addr, Shading s) {
    long w = wordVolatile(v);
    if (addressOf(w) != addr || w == 0) return 0;
    if ((w & GREY) == 0) return addr;
    // The call now using the holder of addr's segment shaded v: its thread took the segment
    // before, keeps it at least until v is no longer grey, and runs one call at a time
    // (Allocator.SlotCache). A stale answer (v published since) is caught below.
    Object holder = alloc.holderOf(addr);
    Object call = holder instanceof Allocator.SlotCache c ? c.current : null;
    Joined j = call instanceof Shading o ? join(s, o) : Joined.FAILED;
    if (j == Joined.DURABLE) {
      // Its group has made every replica durable and is clearing its grey bits (a wait that
      // never waits for this call): wait for v's, so that a call returns only when all it
      // reaches is published.
      long now = awaitCopied(v);
      return now != 0 && addressOf(now) == addr ? addr : 0;
    }
    long now = wordVolatile(v);
    if (j != Joined.FAILED && (now == w || (now != 0 && (now & GREY) == 0 && addressOf(now) == addr))) {
      // Grey all along (the holder was v's), or published since by its group.
      return addr;
    }
    return 0; // its group failed: v turns white; or the holder was stale
  }

  /** The address of v's replica, allocating it (grey) if v is white. */
  private long shade(Object v, Shading s) throws HeapException {
    for (int tries = 0; ; tries++) {
      long w = word(v);
      if (w != 0) {
        long a = addressOf(w);
        if ((w & GREY) == 0 || s.space.holds(a)) return a;
        a = meetGrey(v, a, s);
        if (a != 0) return a;
        backOff(tries); // v's group failed and is turning it white
        continue;
      }
      long a = shadeWhite(v, s);
      if (a != 0) return a;
    }
  }

  /** Shades a white v: 0 if another thread gave it a word first. */
  private long shadeWhite(Object v, Shading s) throws HeapException {
    String canonical = Canonicals.nameOf(v);
    if (canonical != null) {
      long body = canonical.startsWith(Canonicals.BOX) ? 1 : 0;
      long size = HeapFormat.HEADER + 8 * body;
      int cid = classes.idOfCanonical(canonical);
      long addr = allocate(size, s);
      space.putLong(addr, (body << 32) | cid);
      if (body == 1) space.putLong(addr + HeapFormat.HEADER, Canonicals.valueBits(v));
      return setGrey(v, addr, size, true, s);
    }
    Class<?> c = v instanceof Enum<?> e ? e.getDeclaringClass() : v.getClass();
    Layout layout = Layout.of(c);
    if (layout.refusal != null) throw new NotPersistableException(layout.refusal);
    long size = layout.replicaSize(v);
    int cid = classes.idOf(layout, c);
    long addr = allocate(size, s);
    long count =
        switch (layout.kind) {
          case OBJECT -> layout.slots.length;
          case ENUM -> 1 + layout.slots.length;
          case ARRAY -> Array.getLength(v);
          case STRING -> Strings.byteLength((String) v);
          case CANONICAL -> throw new IllegalStateException();
        };
    space.putLong(addr, (count << 32) | cid);
    return setGrey(v, addr, size, false, s);
  }

  /** Gives white v the grey word of its new replica; 0 (replica given back) if v has a word. */
  private long setGrey(Object v, long addr, long size, boolean isCanonical, Shading s) {
    boolean set;
    if (v instanceof Persistent) {
      // JDK code writing into an application subclass decides by identity hash: hash it
      // before its word is set, as setWord does.
      SideTable.hashIfJdkWritten(v);
      set = casWord(v, 0, addr | GREY);
    } else {
      set = SideTable.cas(side.entry(v), 0, addr | GREY);
    }
    if (!set) {
      s.space.unallocate(addr, size);
      return 0;
    }
    s.add(v, addr, size, isCanonical);
    PersistProbe p = probe;
    if (p != null) p.shaded(v);
    return addr;
  }

  /** Copies a grey object into its replica, then verifies against concurrent writers. */
  private void copy(Object o, long addr, boolean isCanonical, Shading s) throws HeapException {
    if (isCanonical) return; // complete when shaded
    Layout layout = Layout.of(o);
    switch (layout.kind) {
      case ENUM -> {
        space.putLong(addr + HeapFormat.HEADER, ((Enum<?>) o).ordinal());
        copyObject(o, addr + 8, layout, s);
      }
      case STRING -> {
        String str = (String) o;
        byte[] bytes = Strings.bytes(str);
        long at = space.off(addr + HeapFormat.HEADER);
        medium.putByte(at, Strings.coder(str));
        medium.put(at + 1, bytes, 0, bytes.length);
      }
      case OBJECT -> copyObject(o, addr, layout, s);
      case ARRAY -> copyArray(o, addr, layout, s);
      case CANONICAL -> throw new IllegalStateException();
    }
  }

  /** Copies the slots of an object (for an enum, {@code addr} is shifted past the ordinal). */
  private void copyObject(Object o, long addr, Layout layout, Shading s) throws HeapException {
    Layout.Slot[] slots = layout.slots;
    long[] copied = new long[slots.length];
    Object[] refs = new Object[slots.length];
    for (int i = 0; i < slots.length; i++) copySlot(o, addr, slots[i], i, copied, refs, s);
    // Transactional Sapphire's verify: a writer that stored before seeing the replica word
    // is caught here, and the slot copied again.
    boolean changed = true;
    while (changed) {
      VarHandle.fullFence();
      changed = false;
      for (int i = 0; i < slots.length; i++) {
        Layout.Slot sl = slots[i];
        boolean same =
            sl.code() == 'L'
                ? Unsafes.U.getObject(o, sl.offset()) == refs[i]
                : Layout.readBits(o, sl) == copied[i];
        if (!same) {
          copySlot(o, addr, sl, i, copied, refs, s);
          changed = true;
        }
      }
    }
  }

  private void copySlot(
      Object o, long addr, Layout.Slot sl, int i, long[] copied, Object[] refs, Shading s)
      throws HeapException {
    long at = addr + HeapFormat.HEADER + 8L * i;
    if (sl.code() == 'L') {
      Object v = Unsafes.U.getObject(o, sl.offset());
      refs[i] = v;
      space.putLong(at, v == null ? 0 : shade(v, s));
    } else {
      long bits = Layout.readBits(o, sl);
      copied[i] = bits;
      space.putLong(at, bits);
    }
  }

  private static final int ARRAY_BATCH = 8192;

  private void copyArray(Object a, long addr, Layout layout, Shading s) throws HeapException {
    int n = Array.getLength(a);
    long body = addr + HeapFormat.HEADER;
    if (layout.elementCode == 'L') {
      Object[] arr = (Object[]) a;
      Object[] seen = new Object[n];
      for (int i = 0; i < n; i++) {
        Object v = arr[i];
        seen[i] = v;
        space.putLong(body + 8L * i, v == null ? 0 : shade(v, s));
      }
      boolean changed = true;
      while (changed) {
        VarHandle.fullFence();
        changed = false;
        for (int i = 0; i < n; i++) {
          Object v = arr[i];
          if (v != seen[i]) {
            seen[i] = v;
            space.putLong(body + 8L * i, v == null ? 0 : shade(v, s));
            changed = true;
          }
        }
      }
      return;
    }
    int es = layout.elementSize;
    for (int from = 0; from < n; from += ARRAY_BATCH) {
      int len = Math.min(ARRAY_BATCH, n - from);
      byte[] bytes = ArrayBytes.toBytes(a, layout.elementCode, from, len);
      long at = space.off(body + (long) from * es);
      medium.put(at, bytes, 0, bytes.length);
      while (true) {
        VarHandle.fullFence();
        byte[] again = ArrayBytes.toBytes(a, layout.elementCode, from, len);
        if (java.util.Arrays.equals(again, bytes)) break;
        bytes = again;
        medium.put(at, bytes, 0, bytes.length);
      }
    }
  }

  /** Space for a replica from the call's own segments, growing the heap if there is none. */
  private long allocate(long size, Shading s) throws HeapException {
    while (true) {
      int seen = growths;
      long addr = size <= SizeClasses.MAX_SMALL
          ? s.space.allocate(SizeClasses.classOf(size))
          : s.space.allocateLarge(size);
      if (addr != 0) {
        clearHeader(addr);
        return addr;
      }
      grow(Math.max(chunkBytes, (size + SizeClasses.SEGMENT - 1) / SizeClasses.SEGMENT * SizeClasses.SEGMENT), seen);
    }
  }

  /** A reused slot may hold an old replica's checks; the copier rewrites all but the padding. */
  private void clearHeader(long addr) {
    space.putLong(addr + ReplicaCheck.S1, 0);
    space.putLong(addr + ReplicaCheck.S2, 0);
  }

  /**
   * Adds a heap space: a new pool section, committed; nothing if another thread added one since
   * the caller saw {@code seen} growths (it retries in that one).
   */
  private void grow(long bytes, int seen) throws HeapException {
    synchronized (poolLock) {
      if (growths != seen) return;
      int index = space.spaces(); // heap.(index-1)
      String name = HeapFormat.HEAP_PREFIX + (index - 1);
      try {
        Section s = pool.addSection(name, bytes, 0);
        pool.commit(new long[] {HeapFormat.VERSION});
        space.map(index, s.offset(), s.length());
        alloc.addChunk(index, s.length());
        growths++;
      } catch (PoolException e) {
        throw new HeapException(
            HeapException.Reason.FULL,
            "persistent heap full (" + alloc.usedBytes() + " bytes live) and the pool cannot grow: "
                + e.getMessage(),
            e);
      }
    }
  }

  // ---------------------------------------------------------------- replica stores

  /**
   * Stores {@code bits} (under {@code mask}) into the replica word at {@code at} of the replica
   * at {@code replica}, with its checks. Inside a section the old word is logged first and the
   * section's end drains; outside, the store is durable on return. A store outside any section
   * into a word another thread's open section owns becomes a section of its own: then this
   * returns true, and the caller calls {@code sections.exit()} once it holds no lock (the exit
   * may wait for that other section).
   */
  private boolean store(long replica, long at, long bits, long mask, boolean isRef, Object target,
      Object oldRef) {
    return store(sections.mine(), replica, at, bits, mask, isRef, target, oldRef);
  }

  /** {@link #store} with the thread's section object looked up by the caller. */
  private boolean store(Sections.Section mine, long replica, long at, long bits, long mask,
      boolean isRef, Object target, Object oldRef) {
    if (isRef && !mayHoldGarbage) {
      long before = space.getLong(at);
      if (before != 0 && before != bits) mayHoldGarbage = true;
    }
    Sections.Section s = mine.depth > 0 ? mine : null;
    boolean implicit = false;
    if (s == null && sections.mayBeOwned() && sections.ownedByOther(at)) {
      s = sections.enterImplicit();
      implicit = true;
    }
    try {
      if (s == null) {
        // Outside any section on shm: the stores through the replica's native address.
        long base = durableInStoreOrder ? space.address(replica, at + 8 - replica) : 0;
        if (base != 0) {
          writeInStoreOrder(stripeOwner(mine), base, replica, at, bits, mask);
        } else {
          writeChecked(mine, replica, at, bits, mask, true);
        }
        return false;
      }
      s.lock.lock();
      try {
        sections.log(s, at, isRef, target, replica, oldRef);
        writeChecked(mine, replica, at, bits, mask, false);
      } finally {
        s.lock.unlock();
      }
      return implicit;
    } catch (RuntimeException | Error e) {
      if (implicit) sections.exit();
      throw e;
    }
  }

  /**
   * The store proper, under the replica's stripe. Outside a section ({@code durable}) the word,
   * then S2, then S1 must reach the medium in that order, each before the next, and all before
   * this returns: a crash then leaves the word alone new (repaired from both checks) or S1
   * alone stale, never S2 alone stale, which {@link ReplicaCheck#verify} refuses as two wrong
   * words. On shm ({@link Medium#durableInStoreOrder}) keeping the three stores in order is
   * enough; elsewhere each is made durable before the next (on {@code file} three msyncs: with
   * one msync of the three, a write-back of the page that started before it could copy the
   * page while the stores are being made, in any order, and leave S2 alone new).
   */
  private void writeChecked(Sections.Section mine, long replica, long at, long bits, long mask,
      boolean durable) {
    ReplicaLocks.Owner me = stripeOwner(mine);
    int stripe = replicaLocks.lock(replica, me);
    try {
      long old = space.getLong(at);
      long neu = (old & ~mask) | (bits & mask);
      if (neu != old) {
        long p = (at - replica) >>> 3;
        long s1 = replica + ReplicaCheck.S1;
        long s2 = replica + ReplicaCheck.S2;
        long s1New = space.getLong(s1) ^ ReplicaCheck.s1Delta(old, neu);
        long s2New = ReplicaCheck.s2Add(space.getLong(s2), ReplicaCheck.s2Delta(p, old, neu));
        if (durable) {
          if (durableInStoreOrder) {
            // Stores kept in order are durable in order: no drain between them.
            space.putLong(at, neu);
            VarHandle.storeStoreFence();
            space.putLong(s2, s2New);
            VarHandle.storeStoreFence();
            space.putLong(s1, s1New);
            space.persist(s1, at + 8 - s1);
          } else {
            space.putLong(at, neu);
            space.persist(at, 8);
            space.putLong(s2, s2New);
            space.persist(s2, 8);
            space.putLong(s1, s1New);
            space.persist(s1, 8);
          }
          return;
        }
        // Inside a section: the old word is logged, and a crash before the section commits
        // rolls it back and recomputes the checks.
        space.putLong(at, neu);
        space.putLong(s1, s1New);
        space.putLong(s2, s2New);
        if (at + 8 - s1 <= 64) {
          space.flush(s1, at + 8 - s1); // a small replica: the word and its checks, one range
        } else {
          space.flush(at, 8);
          space.flush(s1, 16);
        }
      } else if (durable) {
        space.drain();
      }
    } finally {
      replicaLocks.unlock(stripe, me);
    }
  }

  /**
   * {@link #writeChecked} outside a section on a medium durable in store order (shm), through
   * the replica's native address ({@code base}, from {@link HeapSpace#address}): the same
   * stores in the same order, without a window lookup and a bounds check per word.
   */
  private void writeInStoreOrder(ReplicaLocks.Owner me, long base, long replica, long at, long bits,
      long mask) {
    int stripe = replicaLocks.lock(replica, me);
    try {
      writeLocked(base, replica, at, bits, mask);
    } finally {
      replicaLocks.unlock(stripe, me);
      Reference.reachabilityFence(medium); // keeps the mapping behind base
    }
  }

  /**
   * {@link #writeInStoreOrder} if the calling thread ({@code me}) owns the replica's stripe;
   * false, having written nothing, if it does not.
   */
  private boolean writeOwned(ReplicaLocks.Owner me, long base, long replica, long at, long bits,
      long mask) {
    int stripe = replicaLocks.lockOwned(replica, me);
    if (stripe < 0) return false;
    try {
      writeLocked(base, replica, at, bits, mask);
    } finally {
      replicaLocks.unlock(stripe, me);
      Reference.reachabilityFence(medium);
    }
    return true;
  }

  /** The stores of {@link #writeInStoreOrder}, its stripe held. */
  private static void writeLocked(long base, long replica, long at, long bits, long mask) {
    long word = base + (at - replica);
    long old = Unsafes.U.getLong(word);
    long neu = (old & ~mask) | (bits & mask);
    if (neu != old) {
      long s1 = base + ReplicaCheck.S1;
      long s2 = base + ReplicaCheck.S2;
      long s1New = Unsafes.U.getLong(s1) ^ ReplicaCheck.s1Delta(old, neu);
      long s2New = ReplicaCheck.s2Add(Unsafes.U.getLong(s2),
          ReplicaCheck.s2Delta((at - replica) >>> 3, old, neu));
      Unsafes.U.putLong(word, neu);
      VarHandle.storeStoreFence();
      Unsafes.U.putLong(s2, s2New);
      VarHandle.storeStoreFence();
      Unsafes.U.putLong(s1, s1New);
    }
    VarHandle.storeStoreFence(); // the medium's drain: durable before what follows
  }

  /** The thread's stripe owner, kept in its section object (no lookup after the first). */
  private ReplicaLocks.Owner stripeOwner(Sections.Section mine) {
    ReplicaLocks.Owner me = mine.stripes;
    if (me == null) mine.stripes = me = replicaLocks.mine();
    return me;
  }

  // ---------------------------------------------------------------- the barrier's slow paths

  /**
   * The layout a store found last, by any thread: a plain field (a volatile store on each change
   * would be a fence), safe to read racily as what stores read of a layout is final or volatile.
   */
  private Layout lastLayout;

  /**
   * {@link Layout#of(Object)}, answered from the last layout when the class is the same (a
   * program storing into one class in a loop skips the {@code ClassValue} lookup).
   */
  private Layout layoutOf(Object o) {
    Layout l = lastLayout;
    if (l != null && l.type == o.getClass()) return l;
    l = Layout.of(o);
    lastLayout = l;
    return l;
  }

  /**
   * Takes the heap lock shared, for a store of {@code value} that may make it persistent. What
   * needs the heap alone first (recovery of the heap before anything new is persistent, a GC
   * when the heap is mostly full) runs before, never under a shared hold (a shared holder
   * cannot take the lock exclusively).
   */
  private void lockShared(Object value) {
    if (value != null && word(value) == 0 && (!recoveredBuilt || gcDue())
        && heapLock.getReadHoldCount() == 0 && !lock.isHeldByCurrentThread()) {
      lock.lock();
      try {
        ensureRecovered(Thread.currentThread().getContextClassLoader());
        activate();
        maybeCollect();
      } finally {
        lock.unlock();
      }
    }
    shared.lock();
  }

  /** The object's word once no make_persistent is copying it (0: white). */
  private long published(Object o) {
    long w = word(o);
    return (w & GREY) == 0 ? w : awaitCopied(o);
  }

  @Override
  public void putPrimitive(Object o, long bits, int fieldId) {
    if (o instanceof Persistent && putPrimitiveFast((Persistent) o, bits, fieldId)) return;
    putPrimitiveSlow(o, bits, fieldId);
  }

  /**
   * The common durable store of a primitive field: an instrumented object, black, of the class
   * stored into last, by a thread outside any section whose section object is in {@link
   * Sections#recent}, while no section owns words, on shm, into a stripe the thread owns. The
   * same steps as {@link #putPrimitiveSlow} in the same order (the epoch, the word read again
   * under it, the three stores in order), with every lookup answered from a field: the
   * {@code ThreadLocal}, the {@code ClassValue} and the general path's calls cost a quarter of
   * the store (docs/perf.md, persist section 13). Returns false, having written nothing, when
   * any of that does not hold.
   */
  private boolean putPrimitiveFast(Persistent o, long bits, int fieldId) {
    if (!durableInStoreOrder) return false;
    long w = o.$kioku$r();
    if (w == 0 || (w & GREY) != 0) return false;
    Layout layout = lastLayout;
    if (layout == null || layout.type != o.getClass()) return false;
    int slot = layout.slotOf(fieldId);
    if (slot < 0) return false;
    Sections.Section mine = sections.recent();
    if (mine == null || mine.depth != 0) return false;
    WriterEpochs.State st = mine.epoch;
    ReplicaLocks.Owner me = mine.stripes;
    if (st == null || me == null) return false;
    boolean done;
    WriterEpochs.enter(st);
    try {
      w = o.$kioku$r();
      if (w == 0 || sections.mayBeOwned()) return false;
      long replica = addressOf(w);
      long at = replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(slot);
      long base = space.address(replica, at + 8 - replica);
      if (base == 0) return false;
      done = writeOwned(me, base, replica, at, bits, -1L);
    } finally {
      WriterEpochs.exit(st);
    }
    if (done && sections.anyRollbacks()) reassert(o, layout.slots[slot], bits, null);
    return done;
  }

  private void putPrimitiveSlow(Object o, long bits, int fieldId) {
    // Not persistent (the common case for JDK objects): done, before any bookkeeping, which
    // itself uses instrumented JDK classes.
    long w = word(o);
    if (w == 0) return;
    if ((w & GREY) != 0 && awaitCopied(o) == 0) return;
    Layout layout = layoutOf(o);
    int slot = layout.slotOf(fieldId);
    if (slot < 0) return;
    boolean implicit = false;
    Sections.Section mine = sections.mine();
    WriterEpochs.State st = epochs.enter(mine);
    try {
      w = word(o);
      if (w == 0) return;
      long replica = addressOf(w);
      long at = replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(slot);
      implicit = store(mine, replica, at, bits, -1L, false, o, null);
    } finally {
      WriterEpochs.exit(st);
    }
    if (implicit) sections.exit();
    if (sections.anyRollbacks()) reassert(o, layout.slots[slot], bits, null);
  }

  @Override
  public void putReference(Object o, Object value, Object old, int fieldId) {
    // Most objects a JDK class writes are not persistent: answer those without the lock. The
    // store is fenced before this read, so an object turning persistent now is caught by its
    // copier's verify instead.
    if (word(o) == 0) return;
    boolean implicit = false;
    Layout.Slot sl;
    lockShared(value);
    try {
      long w = published(o);
      if (w == 0) return;
      Layout layout = Layout.of(o);
      int slot = layout.slotOf(fieldId);
      if (slot < 0) return;
      sl = layout.slots[slot];
      long target;
      try {
        target = value == null ? 0 : persist(value);
      } catch (RuntimeException e) {
        // Refused (or the heap is full): the store does not happen, in memory either.
        Unsafes.U.putObject(o, sl.offset(), old);
        throw e;
      }
      long replica = addressOf(w);
      long at = replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(slot);
      implicit = store(replica, at, target, -1L, true, o, old);
    } finally {
      shared.unlock();
    }
    if (implicit) sections.exit();
    if (sections.anyRollbacks()) reassert(o, sl, 0, value);
  }

  /**
   * After a store whose word another thread's section may have rolled back meanwhile (that
   * section wrote it before this one, let go of its lock, and then threw): puts this store's
   * value back into the object, which the rollback may have overwritten.
   */
  private static void reassert(Object o, Layout.Slot sl, long bits, Object ref) {
    if (sl.code() == 'L') {
      if (Unsafes.U.getObjectVolatile(o, sl.offset()) != ref) Unsafes.U.putObjectVolatile(o, sl.offset(), ref);
    } else if (Layout.readBits(o, sl) != bits) {
      Layout.writeBits(o, sl, bits);
    }
  }

  /** The thread's volatile store between pre and post: object, and what to undo after. */
  private static final class VolatileStore {
    Object object;
    boolean heapLocked;
    boolean implicit;
  }

  private final ThreadLocal<VolatileStore> volatileStore = ThreadLocal.withInitial(VolatileStore::new);

  @Override
  public void preVolatile(Object o, long bits, Object ref, int fieldId) {
    // The per-object lock (bit 0 of the word), then the replica first: a reader that sees
    // the new DRAM value can rely on it being durable (NVM-first order). A reference store
    // holds the heap lock until postVolatile (the GC must not run between the replica and the
    // object), taken before the word lock as everywhere.
    long w = word(o);
    if (w == 0) return;
    if ((w & GREY) != 0 && awaitCopied(o) == 0) return;
    FieldIds.FieldRef f = FieldIds.WRITTEN.get(fieldId);
    boolean isRef = f.desc().startsWith("L") || f.desc().startsWith("[");
    Layout layout = Layout.of(o);
    int slot = layout.slotOf(fieldId);
    VolatileStore vs = volatileStore.get();
    if (isRef) lockShared(ref);
    boolean done = false;
    try {
      long target = isRef && ref != null ? persist(ref) : 0;
      if (!lockWord(o)) return;
      vs.object = o;
      vs.heapLocked = isRef;
      done = true;
      if (slot >= 0) {
        long replica = addressOf(word(o));
        long at = replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(slot);
        Object oldRef = isRef ? Unsafes.U.getObjectVolatile(o, layout.slots[slot].offset()) : null;
        vs.implicit = store(replica, at, isRef ? target : bits, -1L, isRef, o, oldRef);
      }
    } catch (RuntimeException | Error e) {
      if (vs.object == o) {
        vs.object = null;
        unlockWord(o);
      }
      if (isRef) shared.unlock();
      throw e;
    } finally {
      if (!done && isRef) shared.unlock();
    }
  }

  @Override
  public void postVolatile(Object o, int fieldId) {
    VolatileStore vs = volatileStore.get();
    if (vs.object == o) {
      vs.object = null;
      unlockWord(o);
      if (vs.heapLocked) shared.unlock();
      if (vs.implicit) {
        vs.implicit = false;
        sections.exit();
      }
      return;
    }
    // preVolatile found the object white, and it turned persistent before this store landed:
    // its copier may have read the old value. Write the replica from the object now.
    long w = word(o);
    if (w == 0) return;
    if ((w & GREY) != 0 && awaitCopied(o) == 0) return;
    Layout layout = Layout.of(o);
    int slot = layout.slotOf(fieldId);
    if (slot < 0) return;
    Layout.Slot sl = layout.slots[slot];
    boolean isRef = sl.code() == 'L';
    boolean implicit = false;
    if (isRef) lockShared(Unsafes.U.getObjectVolatile(o, sl.offset()));
    try {
      long target = 0;
      if (isRef) {
        Object v = Unsafes.U.getObjectVolatile(o, sl.offset());
        if (v != null) target = persist(v);
      }
      if (!lockWord(o)) return;
      try {
        long bits = isRef ? target : Layout.readBits(o, sl);
        long replica = addressOf(word(o));
        // The old reference is gone (this store replaced it before the object was persistent).
        implicit = store(replica, replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(slot), bits,
            -1L, isRef, o, null);
      } finally {
        unlockWord(o);
      }
    } finally {
      if (isRef) shared.unlock();
    }
    if (implicit) sections.exit();
  }

  /** Takes the per-object lock (bit 0 of the word); false if the object is white. */
  private boolean lockWord(Object o) {
    while (true) {
      long w = word(o);
      if (w == 0) return false;
      if ((w & GREY) != 0) {
        if (lock.isHeldByCurrentThread()) throw new IllegalStateException("grey object under the heap lock");
        awaitCopied(o);
        continue;
      }
      if ((w & LOCK_BIT) == 0 && casWord(o, w, w | LOCK_BIT)) return true;
      Thread.onSpinWait();
    }
  }

  private void unlockWord(Object o) {
    while (true) {
      long w = word(o);
      if (casWord(o, w, w & ~LOCK_BIT)) return;
    }
  }

  @Override
  public void storePrimitive(Object array, int index, long bits) {
    if (storePrimitiveFast(array, index, bits)) return;
    storePrimitiveSlow(array, index, bits);
  }

  /**
   * {@link #putPrimitiveFast} of an array element: the array of the class stored into last, its
   * word (from the side table) read once, under the epoch, as the general path reads it there.
   */
  private boolean storePrimitiveFast(Object array, int index, long bits) {
    if (!durableInStoreOrder) return false;
    Layout layout = lastLayout;
    if (layout == null || layout.type != array.getClass()) return false;
    Sections.Section mine = sections.recent();
    if (mine == null || mine.depth != 0) return false;
    WriterEpochs.State st = mine.epoch;
    ReplicaLocks.Owner me = mine.stripes;
    if (st == null || me == null) return false;
    boolean done;
    WriterEpochs.enter(st);
    try {
      long w = side.word(array);
      if (w == 0 || (w & GREY) != 0 || sections.mayBeOwned()) return false;
      int es = layout.elementSize;
      long replica = addressOf(w);
      long at = replica + HeapFormat.HEADER + (long) index * es;
      int shift = (int) (at & 7) * 8;
      long mask = es == 8 ? -1L : ((1L << (es * 8)) - 1) << shift;
      long word = at & ~7L;
      long base = space.address(replica, word + 8 - replica);
      if (base == 0) return false;
      done = writeOwned(me, base, replica, word, bits << shift, mask);
    } finally {
      WriterEpochs.exit(st);
    }
    if (done && sections.anyRollbacks()) reassertElement(array, index, bits);
    return done;
  }

  private void storePrimitiveSlow(Object array, int index, long bits) {
    long w = word(array);
    if (w == 0) return;
    if ((w & GREY) != 0 && awaitCopied(array) == 0) return;
    boolean implicit = false;
    Sections.Section mine = sections.mine();
    WriterEpochs.State st = epochs.enter(mine);
    try {
      w = word(array);
      if (w == 0) return;
      Layout layout = layoutOf(array);
      int es = layout.elementSize;
      long replica = addressOf(w);
      long at = replica + HeapFormat.HEADER + (long) index * es;
      int shift = (int) (at & 7) * 8;
      long mask = es == 8 ? -1L : ((1L << (es * 8)) - 1) << shift;
      implicit = store(mine, replica, at & ~7L, bits << shift, mask, false, array, null);
    } finally {
      WriterEpochs.exit(st);
    }
    if (implicit) sections.exit();
    if (sections.anyRollbacks()) reassertElement(array, index, bits);
  }

  private static void reassertElement(Object array, int index, long bits) {
    Layout layout = Layout.of(array.getClass());
    long off = layout.arrayBase + (long) index * layout.elementSize;
    long now =
        switch (layout.elementCode) {
          case 'Z' -> Unsafes.U.getBoolean(array, off) ? 1 : 0;
          case 'B' -> Unsafes.U.getByte(array, off) & 0xffL;
          case 'C', 'S' -> Unsafes.U.getShort(array, off) & 0xffffL;
          case 'I', 'F' -> Unsafes.U.getInt(array, off) & 0xffffffffL;
          default -> Unsafes.U.getLong(array, off);
        };
    if (now == bits) return;
    switch (layout.elementCode) {
      case 'Z' -> Unsafes.U.putBoolean(array, off, bits != 0);
      case 'B' -> Unsafes.U.putByte(array, off, (byte) bits);
      case 'C', 'S' -> Unsafes.U.putShort(array, off, (short) bits);
      case 'I', 'F' -> Unsafes.U.putInt(array, off, (int) bits);
      default -> Unsafes.U.putLong(array, off, bits);
    }
  }

  @Override
  public void storeReference(Object[] array, int index, Object value, Object old) {
    if (word(array) == 0) return;
    boolean implicit = false;
    lockShared(value);
    try {
      long w = published(array);
      if (w == 0) return;
      long target;
      try {
        target = value == null ? 0 : persist(value);
      } catch (RuntimeException e) {
        array[index] = old; // refused: the store does not happen
        throw e;
      }
      long replica = addressOf(w);
      implicit = store(replica, replica + HeapFormat.HEADER + 8L * index, target, -1L, true, array, old);
    } finally {
      shared.unlock();
    }
    if (implicit) sections.exit();
    if (sections.anyRollbacks() && array[index] != value) array[index] = value;
  }

  @Override
  public boolean wantsOldElements(Object dst) {
    return dst instanceof Object[] && word(dst) != 0;
  }

  @Override
  public void copied(Object dst, int dstPos, int length, Object[] oldElements) {
    if (length <= 0) return;
    if (word(dst) == 0) return;
    // One System.arraycopy is one failure-atomic section: all its elements or none.
    sections.enter(false);
    try {
      copiedRange(dst, dstPos, length, oldElements);
    } finally {
      sections.exit();
    }
  }

  private void copiedRange(Object dst, int dstPos, int length, Object[] oldElements) {
    Layout layout = Layout.of(dst.getClass());
    if (layout.elementCode == 'L') {
      lockShared(length > 0 ? ((Object[]) dst)[dstPos] : null);
      try {
        long w = published(dst);
        if (w == 0) return;
        Object[] a = (Object[]) dst;
        long body = addressOf(w) + HeapFormat.HEADER;
        for (int i = dstPos; i < dstPos + length; i++) {
          Object v = a[i];
          Object old = oldElements == null ? null : oldElements[i - dstPos];
          long target;
          try {
            target = v == null ? 0 : persist(v);
          } catch (RuntimeException e) {
            // Refused: the elements not yet copied to the replica go back in memory too.
            if (oldElements != null) System.arraycopy(oldElements, i - dstPos, a, i, dstPos + length - i);
            throw e;
          }
          store(addressOf(w), body + 8L * i, target, -1L, true, dst, old);
        }
      } finally {
        shared.unlock();
      }
      return;
    }
    long w = word(dst);
    if ((w & GREY) != 0 && awaitCopied(dst) == 0) return;
    WriterEpochs.State st = epochs.enter();
    try {
      w = word(dst);
      if (w == 0) return;
      int es = layout.elementSize;
      long replica = addressOf(w);
      long first = replica + HeapFormat.HEADER + (long) dstPos * es;
      long end = first + (long) length * es;
      for (int from = dstPos; from < dstPos + length; from += ARRAY_BATCH) {
        int len = Math.min(ARRAY_BATCH, dstPos + length - from);
        byte[] bytes = ArrayBytes.toBytes(dst, layout.elementCode, from, len);
        long start = replica + HeapFormat.HEADER + (long) from * es;
        long stop = start + bytes.length;
        for (long word = start & ~7L; word < stop; word += 8) {
          long bits = 0;
          long mask = 0;
          for (int k = 0; k < 8; k++) {
            long at = word + k;
            if (at < start || at >= stop || at < first || at >= end) continue;
            bits |= (bytes[(int) (at - start)] & 0xffL) << (8 * k);
            mask |= 0xffL << (8 * k);
          }
          store(replica, word, bits, mask, false, dst, null);
        }
      }
    } finally {
      WriterEpochs.exit(st);
    }
  }

  @Override
  public int faseEnter(Object receiver) {
    if (receiver == null || word(receiver) == 0) return 0;
    sections.enter(false);
    return 1;
  }

  @Override
  public void faseExit(int token) {
    sections.exit();
  }

  @Override
  public void cloned(Object copy) {
    // Barrier already cleared the copy's word; nothing else refers to it.
  }

  // ---------------------------------------------------------------- atomic writes

  /**
   * Where an atomic write at (o, offset) lands in o's replica: the word's address, the mask of
   * the written bytes in it and their shift, whether it holds a reference; null if o has no
   * replicated field or element there. {@code replica} is o's replica.
   */
  private record AtomicTarget(long at, long mask, int shift, char code) {}

  private static AtomicTarget atomicTarget(Object o, long replica, long offset) {
    Layout layout = Layout.of(o);
    if (layout.kind == Layout.Kind.ARRAY) {
      long index = (offset - layout.arrayBase) / layout.arrayScale;
      if (index < 0 || index >= Array.getLength(o)) return null;
      if (layout.elementCode == 'L') return new AtomicTarget(replica + HeapFormat.HEADER + 8 * index, -1L, 0, 'L');
      int es = layout.elementSize;
      long at = replica + HeapFormat.HEADER + index * es;
      int shift = (int) (at & 7) * 8;
      long mask = es == 8 ? -1L : ((1L << (es * 8)) - 1) << shift;
      return new AtomicTarget(at & ~7L, mask, shift, layout.elementCode);
    }
    if (layout.kind != Layout.Kind.OBJECT && layout.kind != Layout.Kind.ENUM) return null;
    int slot = layout.slotAtOffset(offset);
    if (slot < 0) return null;
    return new AtomicTarget(replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(slot), -1L, 0,
        layout.slots[slot].code());
  }

  /** The bits at (o, offset) as the replica keeps them (t.code says the width). */
  private static long readAt(Object o, long offset, char code) {
    return switch (code) {
      case 'Z' -> Unsafes.U.getBooleanVolatile(o, offset) ? 1 : 0;
      case 'B' -> Unsafes.U.getByteVolatile(o, offset) & 0xffL;
      case 'C', 'S' -> Unsafes.U.getShortVolatile(o, offset) & 0xffffL;
      case 'I', 'F' -> Unsafes.U.getIntVolatile(o, offset) & 0xffffffffL;
      case 'J', 'D' -> Unsafes.U.getLongVolatile(o, offset);
      default -> throw new IllegalArgumentException("reference");
    };
  }

  /**
   * An atomic write of a primitive into an object that may be persistent, durable before it is
   * visible: under the object's lock (bit 0 of its word, which every writer of a persistent
   * object takes for these fields), the value the operation will leave is computed and written
   * to the replica, then the operation is performed. A writer that found the object white an
   * instant earlier may have changed the field meanwhile (and will report it); then the
   * replica gets what the field holds after the operation.
   */
  private long atomicPrimitive(Object o, long offset, int op, long expected, long value, boolean wide) {
    long w = word(o);
    if (w == 0 || !lockWord(o)) return performPrimitive(o, offset, op, expected, value, wide, true);
    boolean implicit = false;
    try {
      long replica = addressOf(word(o));
      AtomicTarget t = atomicTarget(o, replica, offset);
      if (t == null) return performPrimitive(o, offset, op, expected, value, wide, false);
      long cur = wide ? Unsafes.U.getLongVolatile(o, offset) : Unsafes.U.getIntVolatile(o, offset);
      long after = switch (op) {
        case Hooks.CAE -> cur == expected ? value : cur;
        case Hooks.GET_AND_ADD -> wide ? cur + value : (int) cur + (int) value;
        default -> value;
      };
      long mask = wide ? -1L : 0xffffffffL;
      if ((after & mask) != (cur & mask)) {
        implicit = store(replica, t.at, (after & mask) << t.shift, t.mask, false, o, null);
      }
      long result = performPrimitive(o, offset, op, expected, value, wide, false);
      long now = readAt(o, offset, t.code);
      if (now != (after & mask)) implicit |= store(replica, t.at, now << t.shift, t.mask, false, o, null);
      return result;
    } finally {
      unlockWord(o);
      if (implicit) sections.exit();
    }
  }

  private long performPrimitive(Object o, long offset, int op, long expected, long value,
      boolean wide, boolean thenCheck) {
    long r = wide
        ? kioku.persist.rt.Atomics.performLong(o, offset, op, expected, value)
        : kioku.persist.rt.Atomics.performInt(o, offset, op, (int) expected, (int) value);
    if (thenCheck) wroteAt(o, offset);
    return r;
  }

  @Override
  public int atomicInt(Object o, long offset, int op, int expected, int value) {
    return (int) atomicPrimitive(o, offset, op, expected, value, false);
  }

  @Override
  public long atomicLong(Object o, long offset, int op, long expected, long value) {
    return atomicPrimitive(o, offset, op, expected, value, true);
  }

  /**
   * As {@link #atomicPrimitive}, for a reference: the new value is made persistent first
   * (under the heap lock, as every reference store), then the object locked.
   */
  @Override
  public Object atomicReference(Object o, long offset, int op, Object expected, Object value) {
    if (word(o) == 0) return performReference(o, offset, op, expected, value, true);
    boolean implicit = false;
    boolean raced = false;
    lockShared(value);
    try {
      if (word(o) == 0) return performReference(o, offset, op, expected, value, true);
      long target = value == null ? 0 : persist(value);
      if (!lockWord(o)) return performReference(o, offset, op, expected, value, true);
      try {
        long replica = addressOf(word(o));
        AtomicTarget t = atomicTarget(o, replica, offset);
        if (t == null) return performReference(o, offset, op, expected, value, false);
        Object cur = Unsafes.U.getObjectVolatile(o, offset);
        Object after = op == Hooks.CAE && cur != expected ? cur : value;
        if (after != cur) implicit = store(replica, t.at, target, -1L, true, o, cur);
        Object result = performReference(o, offset, op, expected, value, false);
        raced = Unsafes.U.getObjectVolatile(o, offset) != after;
        return result;
      } finally {
        unlockWord(o);
      }
    } finally {
      if (raced) wroteAt(o, offset); // a writer that found o white changed it meanwhile
      shared.unlock();
      if (implicit) sections.exit();
    }
  }

  private Object performReference(Object o, long offset, int op, Object expected, Object value,
      boolean thenCheck) {
    Object r = kioku.persist.rt.Atomics.performReference(o, offset, op, expected, value);
    if (thenCheck) wroteAt(o, offset);
    return r;
  }

  /**
   * A write at (o, offset) ran on an object that was white when it started, or a VarHandle
   * write ran: the replica follows the field, under the object's lock, so that whichever
   * report runs last writes the latest value. A reference is made persistent before the lock
   * is taken (making objects persistent may collect, which waits for locked words).
   */
  @Override
  public void wroteAt(Object o, long offset) {
    long w = word(o);
    if (w == 0) return;
    if ((w & GREY) != 0 && awaitCopied(o) == 0) return;
    Layout layout = Layout.of(o);
    int slot = layout.kind == Layout.Kind.ARRAY ? -1 : layout.slotAtOffset(offset);
    boolean isRef = layout.kind == Layout.Kind.ARRAY
        ? layout.elementCode == 'L'
        : slot >= 0 && layout.slots[slot].code() == 'L';
    boolean implicit = false;
    if (isRef) lockShared(Unsafes.U.getObjectVolatile(o, offset));
    try {
      while (true) {
        Object v = null;
        long addr = 0;
        if (isRef) {
          v = Unsafes.U.getObjectVolatile(o, offset);
          if (word(o) == 0) return;
          addr = v == null ? 0 : persist(v);
        }
        if (!lockWord(o)) return;
        try {
          AtomicTarget t = atomicTarget(o, addressOf(word(o)), offset);
          if (t == null) return;
          long replica = addressOf(word(o));
          if (isRef) {
            if (Unsafes.U.getObjectVolatile(o, offset) != v) continue; // moved on: persist it first
            implicit = store(replica, t.at, addr, -1L, true, o, null);
          } else {
            implicit = store(replica, t.at, readAt(o, offset, t.code) << t.shift, t.mask, false, o, null);
          }
          return;
        } finally {
          unlockWord(o);
        }
      }
    } finally {
      if (isRef) shared.unlock();
      if (implicit) sections.exit();
    }
  }

  /** VarHandles' fields, by handle (identity): their offsets; arrays and views: -1 / -2. */
  private final java.util.IdentityHashMap<java.lang.invoke.VarHandle, Long> handleOffsets =
      new java.util.IdentityHashMap<>();

  @Override
  public void varHandleWrote(java.lang.invoke.VarHandle vh, Object o, int index) {
    if (word(o) == 0) return;
    long offset = handleOffset(vh, o);
    if (offset == -1) {
      Layout layout = Layout.of(o.getClass());
      if (layout.kind != Layout.Kind.ARRAY) return;
      wroteAt(o, layout.arrayBase + (long) index * layout.arrayScale);
    } else if (offset == -2) {
      // A view (bytes of an array read as ints...): its index is a byte offset of some width;
      // copy the whole array to its replica again.
      if (o.getClass().isArray()) copied(o, 0, Array.getLength(o), null);
    } else {
      wroteAt(o, offset);
    }
  }

  private long handleOffset(java.lang.invoke.VarHandle vh, Object o) {
    synchronized (handleOffsets) {
      Long known = handleOffsets.get(vh);
      if (known != null) return known;
    }
    long offset = -2;
    java.util.Optional<java.lang.invoke.VarHandle.VarHandleDesc> d = vh.describeConstable();
    if (d.isPresent()) {
      String bsm = d.get().bootstrapMethod().methodName();
      if (bsm.equals("arrayVarHandle")) {
        offset = -1;
      } else if (bsm.equals("fieldVarHandle")) {
        String owner = ((java.lang.constant.ClassDesc) d.get().bootstrapArgs()[0]).descriptorString();
        for (Class<?> k = o.getClass(); k != null && offset == -2; k = k.getSuperclass()) {
          if (!k.descriptorString().equals(owner)) continue;
          try {
            offset = Unsafes.fieldOffset(k.getDeclaredField(d.get().constantName()));
          } catch (NoSuchFieldException e) {
            break;
          }
        }
      }
    }
    if (offset == -2 && !o.getClass().isArray()) {
      throw new PersistenceException("a VarHandle write into a persistent " + o.getClass().getName()
          + " whose field kioku cannot tell (" + vh + "): report this as a kioku bug");
    }
    synchronized (handleOffsets) {
      handleOffsets.put(vh, offset);
    }
    return offset;
  }

  // ---------------------------------------------------------------- undoing in memory

  /**
   * Puts back, in the object, what a rolled-back replica word held: a field, the elements of
   * an array word, or a root. Called by {@link Sections} under its locks.
   */
  @Override
  public void restore(Object target, long replica, long at, long oldBits, Object oldRef) {
    if (target == null) return;
    if (target instanceof Field root) {
      Unsafes.U.putObjectVolatile(Unsafes.U.staticFieldBase(root), Unsafes.U.staticFieldOffset(root), oldRef);
      return;
    }
    Layout layout = Layout.of(target);
    long index = (at - replica - HeapFormat.HEADER) / 8;
    switch (layout.kind) {
      case OBJECT, ENUM -> {
        long slot = layout.kind == Layout.Kind.ENUM ? index - 1 : index;
        if (slot < 0 || slot >= layout.slots.length) return;
        Layout.Slot sl = layout.slots[(int) slot];
        if (sl.code() == 'L') Unsafes.U.putObjectVolatile(target, sl.offset(), oldRef);
        else Layout.writeBits(target, sl, oldBits);
      }
      case ARRAY -> {
        int n = Array.getLength(target);
        if (layout.elementCode == 'L') {
          if (index < n) ((Object[]) target)[(int) index] = oldRef;
          return;
        }
        int es = layout.elementSize;
        long firstByte = at - replica - HeapFormat.HEADER;
        for (int k = 0; k < 8; k += es) {
          long e = (firstByte + k) / es;
          if (e >= n) break;
          long bits = es == 8 ? oldBits : (oldBits >>> (8 * k)) & ((1L << (8 * es)) - 1);
          long off = layout.arrayBase + e * es;
          switch (layout.elementCode) {
            case 'Z' -> Unsafes.U.putBoolean(target, off, bits != 0);
            case 'B' -> Unsafes.U.putByte(target, off, (byte) bits);
            case 'C', 'S' -> Unsafes.U.putShort(target, off, (short) bits);
            case 'I', 'F' -> Unsafes.U.putInt(target, off, (int) bits);
            default -> Unsafes.U.putLong(target, off, bits);
          }
        }
      }
      default -> {
        // strings and canonical instances never change
      }
    }
  }

  // ---------------------------------------------------------------- roots

  private static String rootName(String binaryClassName, String field) {
    return binaryClassName + "#" + field;
  }

  @Override
  public void putRoot(Object value, Object old, int rootId) {
    FieldIds.FieldRef f = FieldIds.ROOTS.get(rootId);
    String owner = f.owner().replace('/', '.');
    boolean inSection = false;
    boolean ready;
    synchronized (readyRootClasses) {
      ready = readyRootClasses.contains(owner);
    }
    // During <clinit> the class's roots are not declared yet: the end of <clinit> decides
    // between the recovered graph and the value the initializer left.
    if (!ready) return;
    if (!recoveredBuilt && heapLock.getReadHoldCount() == 0) {
      lock.lock();
      try {
        ensureRecovered(Thread.currentThread().getContextClassLoader());
      } finally {
        lock.unlock();
      }
    }
    lockShared(value);
    try {
      sections.enter(false);
      inSection = true;
      setRoot(rootName(owner, f.name()), value, rootField(owner, f.name()), old);
    } catch (HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    } finally {
      shared.unlock();
      if (inSection) sections.exit();
    }
  }

  private static Field rootField(String owner, String name) {
    try {
      Class<?> c = Class.forName(owner, false, Thread.currentThread().getContextClassLoader());
      return c.getDeclaredField(name);
    } catch (ReflectiveOperationException | LinkageError e) {
      return null;
    }
  }

  /**
   * Makes {@code value} persistent and stores it into the root, together with the entry's
   * check, in the caller's failure-atomic section (the caller enters it, and exits it once it
   * holds no lock: the exit may wait for another thread's section). Lock held.
   */
  private void setRoot(String name, Object value, Field field, Object old) throws HeapException {
    Sections.Section s = sections.open();
    long entry = roots.slot(name);
    long target;
    try {
      target = value == null ? 0 : persist(value);
    } catch (RuntimeException e) {
      if (field != null && Modifier.isStatic(field.getModifiers())) restore(field, -1, 0, 0, old);
      throw e;
    }
    long valueAt = HeapFormat.address(0, entry - space.off(0)) + HeapFormat.ROOT_VALUE;
    s.lock.lock();
    try {
      // Threads assigning one root at once (the heap lock is shared) write its value and check
      // one after the other, never mixed.
      synchronized (roots) {
        sections.log(s, valueAt, true, field, -1, old);
        sections.log(s, valueAt + HeapFormat.ROOT_CHECK, false, null, -1, null);
        if (medium.getLong(entry + HeapFormat.ROOT_VALUE) != 0) mayHoldGarbage = true;
        medium.putLong(entry + HeapFormat.ROOT_VALUE, target);
        medium.putLong(entry + HeapFormat.ROOT_CHECK, roots.check(name, target));
        medium.flush(entry, 16);
      }
    } finally {
      s.lock.unlock();
    }
  }

  /**
   * Moves a root's value to another name (a rename the program declared), in one
   * failure-atomic section.
   */
  void moveRoot(String from, String to) throws HeapException {
    long value = roots.get(from);
    if (value == 0) return;
    rewriteRoots(new String[] {to, from}, new long[] {value, 0});
  }

  /** Drops a root's data (the program said so). */
  void clearRoot(String name) throws HeapException {
    if (roots.get(name) == 0) return;
    rewriteRoots(new String[] {name}, new long[] {0});
  }

  private void rewriteRoots(String[] names, long[] values) throws HeapException {
    Sections.Section s = sections.enter(false);
    try {
      long[] entries = new long[names.length];
      for (int i = 0; i < names.length; i++) entries[i] = roots.slot(names[i]);
      s.lock.lock();
      try {
        for (long entry : entries) {
          long at = HeapFormat.address(0, entry - space.off(0)) + HeapFormat.ROOT_VALUE;
          sections.log(s, at, true, null, -1, null);
          sections.log(s, at + HeapFormat.ROOT_CHECK, false, null, -1, null);
        }
        mayHoldGarbage = true;
        for (int i = 0; i < names.length; i++) {
          medium.putLong(entries[i] + HeapFormat.ROOT_VALUE, values[i]);
          medium.putLong(entries[i] + HeapFormat.ROOT_CHECK, roots.check(names[i], values[i]));
          medium.flush(entries[i], 16);
        }
      } finally {
        s.lock.unlock();
      }
    } finally {
      sections.exit();
    }
  }

  @Override
  public void rootsDeclared(Class<?> c) {
    lock.lock();
    sections.enter(false); // every root of the class changes in one section
    try {
      synchronized (readyRootClasses) {
        if (readyRootClasses.contains(c.getName())) return;
      }
      ensureRecovered(c.getClassLoader());
      for (Field f : c.getDeclaredFields()) {
        if (!f.isAnnotationPresent(DurableRoot.class)) continue;
        if (!Modifier.isStatic(f.getModifiers()) || f.getType().isPrimitive()) continue;
        String name = rootName(c.getName(), f.getName());
        long base = Unsafes.U.staticFieldOffset(f);
        Object holder = Unsafes.U.staticFieldBase(f);
        Object graph = null;
        String from = roots.get(name) != 0 ? name : rootNames.formerNameWithData(this, c, f);
        if (from != null) graph = recoveredGraphs(c.getClassLoader()).get(from);
        if (from != null) {
          if (graph != null && !f.getType().isInstance(graph)) {
            throw new PersistenceException(
                "durable root " + from + " holds a " + graph.getClass().getName()
                    + " but " + name + " is declared " + f.getType().getName()
                    + ": restore the declaration or start with a new pool");
          }
          if (!from.equals(name)) moveRoot(from, name);
          Unsafes.U.putObjectVolatile(holder, base, graph);
        } else {
          Object v = Unsafes.U.getObjectVolatile(holder, base);
          if (v != null) setRoot(name, v, f, null);
        }
      }
      synchronized (readyRootClasses) {
        readyRootClasses.add(c.getName());
      }
    } catch (HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    } finally {
      lock.unlock();
      sections.exit();
    }
  }

  /** True if the heap holds any non-null root (the thesis's isValidData). */
  public boolean hasData() {
    for (long v : roots.all().values()) if (v != 0) return true;
    return false;
  }

  /** Root names and whether they hold a value. */
  public Map<String, Long> roots() {
    return roots.all();
  }

  // ---------------------------------------------------------------- recovery

  /**
   * Rebuilds the objects of the heap as it was opened, before anything may change it: a new
   * replica or root first needs the old graphs rebuilt, or recovery would later give the
   * graph a second set of objects. Lock held.
   */
  private void ensureRecovered(ClassLoader first) {
    if (recoveredBuilt || recovering) return;
    if (marksAtOpen == null) {
      recoveredBuilt = true;
      return;
    }
    recovering = true;
    try {
      recoveredRoots = new HeapRecovery(this, first, marksAtOpen).run();
    } catch (HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    } finally {
      recovering = false;
    }
    marksAtOpen = null;
    recoveredBuilt = true;
  }

  /**
   * Moves recovered objects whose class gained or reordered fields (left white by recovery) to
   * replicas of the current layout, and points every replica and root that referred to their
   * old replicas at the new ones — one failure-atomic section, so a crash in the middle leaves
   * the old heap, which the next start moves again. The old replicas become garbage. Lock held.
   */
  void migrate(Object[] objects, java.util.IdentityHashMap<Object, Boolean> stale,
      Map<String, Object> rootGraphs) throws HeapException {
    sections.enter(false);
    try {
      for (Object o : stale.keySet()) persist(o);
      for (Object o : objects) {
        if (stale.containsKey(o)) continue;
        long w = word(o);
        if (w == 0) continue;
        long replica = addressOf(w);
        Layout layout = Layout.of(o);
        if (layout.kind == Layout.Kind.OBJECT || layout.kind == Layout.Kind.ENUM) {
          for (int i = 0; i < layout.slots.length; i++) {
            Layout.Slot sl = layout.slots[i];
            if (sl.code() != 'L') continue;
            Object v = Unsafes.U.getObject(o, sl.offset());
            if (v == null || !stale.containsKey(v)) continue;
            store(replica, replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(i),
                addressOf(word(v)), -1L, true, o, v);
          }
        } else if (layout.kind == Layout.Kind.ARRAY && layout.elementCode == 'L') {
          Object[] a = (Object[]) o;
          for (int i = 0; i < a.length; i++) {
            if (a[i] == null || !stale.containsKey(a[i])) continue;
            store(replica, replica + HeapFormat.HEADER + 8L * i, addressOf(word(a[i])), -1L, true, o, a[i]);
          }
        }
      }
      for (Map.Entry<String, Object> r : rootGraphs.entrySet()) {
        if (r.getValue() != null && stale.containsKey(r.getValue())) {
          setRoot(r.getKey(), r.getValue(), null, r.getValue());
        }
      }
    } finally {
      sections.exit();
    }
  }

  /**
   * Rebuilds, in one failure-atomic section, the hash tables of recovered objects that no
   * longer find their keys (see Rehash). Lock held.
   */
  void rehash(List<Object> tables, List<Object> concurrentMaps) throws HeapException {
    Rehash.FieldStore stores = new Rehash.FieldStore() {
      @Override
      public void store(Object target, String field, Object value) {
        storeFinalReference(target, field, value);
      }

      @Override
      public void storeBits(Object target, String field, long bits) {
        storeFinalBits(target, field, bits);
      }
    };
    sections.enter(false);
    try {
      Rehash.rebuild(tables, stores);
      ConcurrentMaps.rebuild(concurrentMaps, stores);
    } finally {
      sections.exit();
    }
  }

  /** As {@link #storeFinalReference}, for a primitive field. Lock held. */
  private void storeFinalBits(Object target, String field, long bits) {
    Layout layout = Layout.of(target);
    for (int i = 0; i < layout.slots.length; i++) {
      Layout.Slot sl = layout.slots[i];
      if (sl.code() == 'L' || !sl.field().getName().equals(field)) continue;
      long w = word(target);
      if (w == 0) throw new IllegalStateException(target.getClass().getName() + " is not persistent");
      long replica = addressOf(w);
      store(replica, replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(i), bits, -1L, false, target, null);
      Layout.writeBits(target, sl, bits);
      return;
    }
    throw new IllegalStateException(target.getClass().getName() + " has no replicated field " + field);
  }

  /**
   * Stores {@code value} into the named reference field of a persistent object whose code does
   * not store it (a final field of an immutable JDK table): the replica in the caller's
   * section, then the object. Lock held.
   */
  private void storeFinalReference(Object target, String field, Object value) {
    Layout layout = Layout.of(target);
    for (int i = 0; i < layout.slots.length; i++) {
      Layout.Slot sl = layout.slots[i];
      if (sl.code() != 'L' || !sl.field().getName().equals(field)) continue;
      long w = word(target);
      if (w == 0) throw new IllegalStateException(target.getClass().getName() + " is not persistent");
      long v = value == null ? 0 : persist(value);
      long replica = addressOf(w);
      Object old = Unsafes.U.getObject(target, sl.offset());
      store(replica, replica + HeapFormat.HEADER + 8L * layout.wordOfSlot(i), v, -1L, true, target, old);
      Unsafes.U.putObjectVolatile(target, sl.offset(), value);
      return;
    }
    throw new IllegalStateException(target.getClass().getName() + " has no replicated field " + field);
  }

  /**
   * Rebuilds the heap's objects now if every class it needs can be loaded through
   * {@code loader} (at start-up, so a heap that cannot be recovered stops the program before
   * it runs); leaves it for the first use of the heap if a class is missing there (it may
   * come from a class loader the program creates later). Also checks that every root holding
   * data is still declared (or its rename declared).
   */
  public void recoverEagerly(ClassLoader loader) throws HeapException {
    lock.lock();
    try {
      ensureRecovered(loader);
      // The program's classes are all there: a root whose class is missing was renamed.
      rootNames.checkDeclared(this, loader, true);
    } catch (PersistenceException e) {
      if (e.getCause() instanceof HeapException he) {
        if (he.reason() != HeapException.Reason.MISSING_CLASS) throw he;
        rootNames.checkDeclared(this, loader, false);
        return;
      }
      throw e;
    } finally {
      lock.unlock();
    }
  }

  /** The recovered graph of every root (built once, with the given class loader first). */
  private Map<String, Object> recoveredGraphs(ClassLoader first) {
    ensureRecovered(first);
    return recoveredRoots;
  }

  /** Eagerly rebuilds all roots' graphs (the thesis's recovery(ClassLoader...)). */
  public Map<String, Object> recover(ClassLoader first) throws HeapException {
    lock.lock();
    try {
      return recoveredGraphs(first);
    } catch (PersistenceException e) {
      if (e.getCause() instanceof HeapException he) throw he;
      throw e;
    } finally {
      lock.unlock();
    }
  }

  ClassTable classes() {
    return classes;
  }

  /**
   * Called by recovery before adopting objects. The barrier reports to this heap from here
   * on: recovery runs the program's and java.util's instrumented code on recovered objects
   * (tables rebuilt, added fields initialized), whose stores must reach this heap's replicas
   * (a JVM has one heap; tests that open several hand the barrier to the one they use).
   */
  void beginAdoption() {
    activate();
    Barrier.hooks = this;
  }

  /**
   * Called by recovery for every rebuilt object: it is persistent, with this replica. True if
   * the object keeps its own replica word: the caller lists it at {@link #endAdoption}.
   */
  boolean adopt(Object o, long addr) {
    if (o instanceof Persistent p && !(o instanceof Enum<?>)) {
      SideTable.hashIfJdkWritten(o);
      p.$kioku$r(addr); // a new object: nothing else can see it yet
      return true;
    } else if (o instanceof Enum<?> || Canonicals.nameOf(o) != null) {
      if (word(o) == 0) setWord(o, addr); // a shared instance, not a new object
    } else {
      side.add(o).word = addr;
    }
    return false;
  }

  /**
   * Called by recovery once every object is adopted, with those {@link #adopt} said keep their
   * own word in {@code listed[0..n)}; the side table keeps the array (no copy).
   */
  void endAdoption(Object[] listed, int n) {
    side.listRecovered(listed, n);
  }

  // ---------------------------------------------------------------- marking and GC

  /** Every replica reachable from the roots and the open undo logs, checked as it goes. */
  Marks markLive() throws HeapException {
    return new HeapMarking(this).mark(null);
  }

  /**
   * At open: marks, and checks every replica it reaches (repairing one wrong word); replicas
   * holding an address of {@code touched} (rolled back just now) get their checks recomputed
   * instead. Rebuilds the allocator from the replicas as it marks them.
   */
  private Marks markLive(long[] touched) throws HeapException {
    HeapMarking m = new HeapMarking(this, alloc);
    alloc.beginRebuild();
    Marks live = m.mark(touched);
    alloc.finishRebuild();
    liveAtLastGc = alloc.usedBytes();
    repairedAtOpen += m.repaired();
    return live;
  }

  Sections sections() {
    return sections;
  }

  static HeapException damagedAt(long addr, String what) {
    return new HeapException(
        HeapException.Reason.DAMAGED,
        "persistent heap damaged: the replica at 0x" + Long.toHexString(addr) + " " + what
            + "; restore the pool from a backup");
  }

  private void rebuildAllocator(Marks live) throws HeapException {
    alloc.beginRebuild();
    live.forEach(
        (i, addr) -> {
          long header = space.getLong(addr);
          long size = classes.get((int) header).replicaSize(header >>> 32);
          if (!alloc.markUsed(addr, size)) throw damagedAt(addr, "overlaps another replica");
        });
    alloc.finishRebuild();
    liveAtLastGc = alloc.usedBytes();
  }

  /**
   * Whether a GC is due: something may have died and the heap is mostly full and has grown
   * since the last one. Read without the heap lock by {@link #lockShared} (which takes it
   * exclusively only then); {@link #maybeCollect} decides again under it.
   */
  private boolean gcDue() {
    if (!mayHoldGarbage && sections.rollbackCount() == rollbacksAtLastGc) return false;
    long cap = alloc.approxCapacityBytes();
    long used = alloc.approxUsedBytes();
    return used > liveAtLastGc * 1.25
        && (used > cap * 0.9 || used - liveAtLastGc > garbageBudgetBytes);
  }

  /**
   * Replica bytes allocated since the last GC past which a GC is due even in a heap far from
   * full. The Java objects of replicas are listed strongly ({@link SideTable}), so garbage
   * replicas keep their objects in the Java heap until a GC: without this bound a heap that
   * was once large, then shrank and churns, would hold up to its old size of dead objects.
   * An eighth of the Java heap's limit; a field so that tests can lower it.
   */
  long garbageBudgetBytes = Runtime.getRuntime().maxMemory() / 8;

  /** GC when {@link #gcDue}. Lock held (exclusive). */
  private void maybeCollect() {
    if (recovering) return; // objects being moved are reachable only from memory meanwhile
    if (gcDue()) {
      try {
        collect();
      } catch (HeapException e) {
        throw new PersistenceException(e.getMessage(), e);
      }
    }
  }

  /**
   * Mark-and-sweep of the replicas from the roots (never moving): objects whose replicas die
   * turn white first, then writers still inside a store are waited out, then the space is
   * freed. Only DRAM metadata changes, so a crash during a GC loses nothing.
   */
  public void collect() throws HeapException {
    lock.lock();
    try {
      // Cleared before marking: a reference overwritten from here on sets it again.
      mayHoldGarbage = false;
      rollbacksAtLastGc = sections.rollbackCount();
      Marks live = markLive();
      side.forEachLive(
          o -> {
            long w = word(o);
            if (w != 0 && !live.contains(addressOf(w))) clearWord(o);
          });
      side.dropWhite(this::word);
      VarHandle.fullFence();
      epochs.awaitGracePeriod();
      rebuildAllocator(live);
      gcRuns++;
    } finally {
      lock.unlock();
    }
  }

  /**
   * Compares every persistent object reachable from {@code root} with its replica: each
   * primitive field and element equal, each reference pointing at the referent's replica, and
   * the replica's check words right. Returns one line per difference (empty: they agree). For
   * tests and diagnostics; the program should not be writing the graph meanwhile.
   */
  public List<String> verify(Object root) {
    return new GraphVerifier(this).verify(root);
  }

  Medium medium() {
    return medium;
  }

  public Stats stats() {
    lock.lock();
    try {
      return new Stats(side.size(), alloc.usedBytes(), alloc.capacityBytes(), classes.size(),
          gcRuns, repairedAtOpen, logSpace.blocks(), sections.earlyCommits());
    } finally {
      lock.unlock();
    }
  }

  /**
   * Runs {@code action} as one failure-atomic section of this thread; an exception that leaves
   * it rolls it back (unless another thread's section depends on it, see {@link Sections}).
   */
  public void atomically(Runnable action) {
    sections.enter(true);
    try {
      action.run();
    } catch (RuntimeException | Error e) {
      sections.exitByException();
      throw e;
    }
    sections.exit();
  }

  @Override
  public void close() {
    lock.lock();
    try {
      if (closed) return;
      closed = true;
      if (Barrier.hooks == this) {
        Barrier.active = false;
        Barrier.hooks = null;
      }
      // Objects that keep their replica word in their own field (application objects, enum
      // constants, which outlive any heap) stop being persistent: another heap opened in this
      // JVM must not take them for its own.
      side.forEachLive(o -> {
        if (o instanceof Persistent) clearWord(o);
      });
      side.clearRecovered();
      pool.close();
    } finally {
      lock.unlock();
    }
  }
}
