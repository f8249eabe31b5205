package kioku.persist.heap;

import java.lang.reflect.Array;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.lang.invoke.VarHandle;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.locks.ReentrantLock;
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
 * <p>Locking: making objects persistent, storing a reference into a persistent object,
 * allocation and GC hold {@link #lock}. Primitive stores into replicas are lock-free; the GC
 * waits them out through {@link WriterEpochs} before it frees anything.
 */
public final class PersistentHeap implements Hooks, AutoCloseable {
  /** The pool kind tag of a Java persistent heap. */
  public static final String POOL_KIND = HeapFormat.KIND;

  /** Creation settings. */
  public record Options(long chunkBytes, int logSlots, long logSlotBytes) {
    public static Options defaults() {
      return new Options(HeapFormat.DEFAULT_CHUNK, UndoLogs.DEFAULT_SLOTS, UndoLogs.DEFAULT_SLOT_BYTES);
    }
  }

  /** Numbers for tests, benchmarks and {@code KiokuPersist.stats()}. */
  public record Stats(
      long persistentObjects, long usedBytes, long capacityBytes, int classes, long gcRuns) {}

  private final Pool pool;
  private final Medium medium;
  private final HeapSpace space;
  private final Allocator alloc = new Allocator();
  private final ClassTable classes;
  private final RootTable roots;
  private final UndoLogs logs;
  private final SideTable side = new SideTable();
  private final WriterEpochs epochs = new WriterEpochs();
  private final ReentrantLock lock = new ReentrantLock();
  private final long chunkBytes;
  private final Set<String> readyRootClasses = new HashSet<>();
  /** The heap's live replicas at open while its objects are still to be rebuilt. */
  private Marks marksAtOpen;

  private boolean recoveredBuilt;
  private Map<String, Object> recoveredRoots = Map.of();
  private long gcRuns;
  private long liveAtLastGc;
  private boolean closed;

  private PersistentHeap(Pool pool, long chunkBytes, Section meta, Section cls, Section log) {
    this.pool = pool;
    this.medium = pool.medium();
    this.space = new HeapSpace(medium);
    this.chunkBytes = chunkBytes;
    this.classes = new ClassTable(medium, meta.offset(), cls.offset(), cls.length());
    this.roots = new RootTable(medium, meta.offset());
    this.logs = new UndoLogs(this, medium, meta.offset(), log);
    space.map(0, meta.offset(), meta.length());
  }

  /** Makes a new heap in an empty pool of kind {@link HeapFormat#KIND}. */
  public static PersistentHeap create(Pool pool, Options o) throws HeapException {
    checkKind(pool);
    if (!pool.sections().isEmpty()) {
      throw new HeapException(
          HeapException.Reason.WRONG_POOL,
          "pool " + pool.path() + " already holds sections: open it instead of creating a heap");
    }
    try {
      Section meta = pool.addSection(HeapFormat.META, HeapFormat.META_LEN, 0);
      Section cls = pool.addSection(HeapFormat.CLASSES, HeapFormat.CLASSES_LEN, 0);
      Section log = pool.addSection(HeapFormat.LOG, UndoLogs.sectionLength(o.logSlots, o.logSlotBytes), 0);
      Section heap0 = pool.addSection(HeapFormat.HEAP_PREFIX + 0, o.chunkBytes, 0);
      Medium m = pool.medium();
      long b = meta.offset();
      m.putLong(b + HeapFormat.M_MAGIC, HeapFormat.MAGIC);
      m.putInt(b + HeapFormat.M_VERSION, HeapFormat.VERSION);
      m.putInt(b + HeapFormat.M_SEGMENT, SizeClasses.SEGMENT);
      m.putLong(b + HeapFormat.M_CHUNK, o.chunkBytes);
      m.putInt(b + HeapFormat.M_LOG_SLOTS, o.logSlots);
      m.putInt(b + HeapFormat.M_LOG_SLOT_BYTES, (int) o.logSlotBytes);
      m.persist(b, 64);
      pool.commit(new long[] {HeapFormat.VERSION});
      PersistentHeap h = new PersistentHeap(pool, o.chunkBytes, meta, cls, log);
      h.space.map(1, heap0.offset(), heap0.length());
      h.alloc.addChunk(1, heap0.length());
      return h;
    } catch (PoolException e) {
      throw new HeapException(HeapException.Reason.POOL, e.getMessage(), e);
    }
  }

  /** Opens the heap of a pool: checks it, rolls back interrupted failure-atomic sections. */
  public static PersistentHeap open(Pool pool) throws HeapException {
    checkKind(pool);
    Section meta = need(pool, HeapFormat.META);
    Section cls = need(pool, HeapFormat.CLASSES);
    Section log = need(pool, HeapFormat.LOG);
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
    long chunk = m.getLong(b + HeapFormat.M_CHUNK);
    PersistentHeap h = new PersistentHeap(pool, chunk, meta, cls, log);
    for (int i = 0; ; i++) {
      Optional<Section> s = pool.section(HeapFormat.HEAP_PREFIX + i);
      if (s.isEmpty()) break;
      h.space.map(i + 1, s.get().offset(), s.get().length());
      h.alloc.addChunk(i + 1, s.get().length());
    }
    h.classes.load();
    h.roots.load();
    h.logs.recover();
    h.lock.lock();
    try {
      Marks live = h.markLive();
      h.rebuildAllocator(live);
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

  HeapSpace space() {
    return space;
  }

  // ---------------------------------------------------------------- replica words

  private static final long LOCK_BIT = 1L;

  private static final ClassValue<Long> WORD_OFFSET =
      new ClassValue<>() {
        @Override
        protected Long computeValue(Class<?> c) {
          for (Class<?> k = c; k != null; k = k.getSuperclass()) {
            try {
              return Unsafes.U.objectFieldOffset(k.getDeclaredField("$kioku$r"));
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
  private void setWord(Object o, long addr) {
    boolean set;
    if (o instanceof Persistent) {
      set = casWord(o, 0, addr);
      side.register(o);
    } else {
      set = SideTable.cas(side.entry(o), 0, addr);
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

  // ---------------------------------------------------------------- make_persistent

  /**
   * One make_persistent: the grey objects in shading order (which is also the work list) and
   * their replicas. Plain arrays, not JDK collections: those are instrumented, and every call
   * would cost a barrier lookup.
   */
  private static final class Shading {
    Object[] objects = new Object[16];
    long[] addrs = new long[16];
    long[] sizes = new long[16];
    int count;
    int next; // objects[next..count) are still to copy

    void add(Object o, long addr, long size) {
      if (count == objects.length) {
        objects = java.util.Arrays.copyOf(objects, count * 2);
        addrs = java.util.Arrays.copyOf(addrs, count * 2);
        sizes = java.util.Arrays.copyOf(sizes, count * 2);
      }
      objects[count] = o;
      addrs[count] = addr;
      sizes[count] = size;
      count++;
    }
  }

  private void activate() {
    if (!Barrier.active) {
      Barrier.hooks = this;
      Barrier.active = true;
      Safepoint.force();
    }
  }

  /**
   * make_persistent: gives {@code v} and everything it reaches a durable replica and returns
   * the address of v's. Lock held.
   */
  long persist(Object v) {
    long w = word(v);
    if (w != 0) return addressOf(w);
    ensureRecovered(Thread.currentThread().getContextClassLoader());
    activate();
    maybeCollect();
    Shading s = new Shading();
    try {
      long addr = shade(v, s);
      while (s.next < s.count) {
        int i = s.next++;
        copy(s.objects[i], s.addrs[i], s);
      }
      for (int i = 0; i < s.count; i++) space.flush(s.addrs[i], s.sizes[i]);
      space.drain();
      return addr;
    } catch (RuntimeException | HeapException e) {
      // Nothing published them: turn the grey objects white again and free their space.
      for (int i = 0; i < s.count; i++) clearWord(s.objects[i]);
      epochs.awaitGracePeriod();
      for (int i = 0; i < s.count; i++) alloc.free(s.addrs[i], s.sizes[i]);
      if (e instanceof RuntimeException re) throw re;
      throw new PersistenceException(e.getMessage(), e);
    }
  }

  /** The address of v's replica, allocating it (grey) if v is white. */
  private long shade(Object v, Shading s) throws HeapException {
    long w = word(v);
    if (w != 0) return addressOf(w);
    Class<?> c = v.getClass();
    if (v instanceof Enum<?> e) c = e.getDeclaringClass();
    Layout layout = Layout.of(c);
    if (layout.refusal != null) throw new NotPersistableException(layout.refusal);
    long size = layout.replicaSize(v);
    int cid = classes.idOf(layout, c);
    long addr = allocate(size);
    long count =
        switch (layout.kind) {
          case OBJECT -> layout.slots.length;
          case ENUM -> 1;
          case ARRAY -> Array.getLength(v);
          case STRING -> Strings.byteLength((String) v);
        };
    space.putLong(addr, (count << 32) | cid);
    setWord(v, addr);
    s.add(v, addr, size);
    return addr;
  }

  /** Copies a grey object into its replica, then verifies against concurrent writers. */
  private void copy(Object o, long addr, Shading s) throws HeapException {
    Class<?> c = o instanceof Enum<?> e ? e.getDeclaringClass() : o.getClass();
    Layout layout = Layout.of(c);
    switch (layout.kind) {
      case ENUM -> space.putLong(addr + HeapFormat.HEADER, ((Enum<?>) o).ordinal());
      case STRING -> {
        String str = (String) o;
        byte[] bytes = Strings.bytes(str);
        long at = space.off(addr + HeapFormat.HEADER);
        medium.putByte(at, Strings.coder(str));
        medium.put(at + 1, bytes, 0, bytes.length);
      }
      case OBJECT -> copyObject(o, addr, layout, s);
      case ARRAY -> copyArray(o, addr, layout, s);
    }
  }

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

  private long allocate(long size) throws HeapException {
    long addr = alloc.allocate(size);
    if (addr != 0) return addr;
    grow(Math.max(chunkBytes, (size + SizeClasses.SEGMENT - 1) / SizeClasses.SEGMENT * SizeClasses.SEGMENT));
    addr = alloc.allocate(size);
    if (addr == 0) throw new IllegalStateException("no space after growing the heap");
    return addr;
  }

  /** Adds a heap space: a new pool section, committed. */
  private void grow(long bytes) throws HeapException {
    int index = space.spaces(); // heap.(index-1)
    String name = HeapFormat.HEAP_PREFIX + (index - 1);
    try {
      Section s = pool.addSection(name, bytes, 0);
      pool.commit(new long[] {HeapFormat.VERSION});
      space.map(index, s.offset(), s.length());
      alloc.addChunk(index, s.length());
    } catch (PoolException e) {
      throw new HeapException(
          HeapException.Reason.FULL,
          "persistent heap full (" + alloc.usedBytes() + " bytes live) and the pool cannot grow: "
              + e.getMessage(),
          e);
    }
  }

  // ---------------------------------------------------------------- the barrier's slow paths

  @Override
  public void putPrimitive(Object o, long bits, int fieldId) {
    // Not persistent (the common case for JDK objects): done, before any bookkeeping, which
    // itself uses instrumented JDK classes.
    if (word(o) == 0) return;
    WriterEpochs.State st = epochs.enter();
    try {
      long w = word(o);
      if (w == 0) return;
      int slot = Layout.of(o.getClass()).slotOf(fieldId);
      if (slot < 0) return;
      writeWord(addressOf(w) + HeapFormat.HEADER + 8L * slot, bits, false);
    } finally {
      WriterEpochs.exit(st);
    }
  }

  @Override
  public void putReference(Object o, Object value, int fieldId) {
    // Most objects a JDK class writes are not persistent: answer those without the lock. The
    // store is fenced before this read, so an object turning persistent now is caught by its
    // copier's verify instead.
    if (word(o) == 0) return;
    lock.lock();
    try {
      long w = word(o);
      if (w == 0) return;
      int slot = Layout.of(o.getClass()).slotOf(fieldId);
      if (slot < 0) return;
      long target = value == null ? 0 : persist(value);
      writeWord(addressOf(w) + HeapFormat.HEADER + 8L * slot, target, true);
    } finally {
      lock.unlock();
    }
  }

  /**
   * One 8-byte replica store, durable on return outside a failure-atomic section (inside one,
   * the undo log holds the old value durably first and the section's end drains).
   */
  private void writeWord(long at, long value, boolean isRef) {
    boolean inSection = logs.beforeWrite(at, isRef);
    space.putLong(at, value);
    space.flush(at, 8);
    if (!inSection) space.drain();
  }

  @Override
  public void preVolatile(Object o, long bits, Object ref, int fieldId) {
    // The per-object lock (bit 0 of the word), then the replica first: a reader that sees
    // the new DRAM value can rely on it being durable (NVM-first order).
    long target = 0;
    FieldIds.FieldRef f = FieldIds.WRITTEN.get(fieldId);
    boolean isRef = f.desc().startsWith("L") || f.desc().startsWith("[");
    if (isRef && ref != null) {
      if (word(o) == 0) return;
      target = persistLocked(ref);
    }
    if (!lockWord(o)) return;
    volatileLockHeld.set(o);
    long w = word(o);
    int slot = Layout.of(o.getClass()).slotOf(fieldId);
    if (slot >= 0) {
      writeWord(addressOf(w) + HeapFormat.HEADER + 8L * slot, isRef ? target : bits, isRef);
    }
  }

  @Override
  public void postVolatile(Object o, int fieldId) {
    if (volatileLockHeld.get() == o) {
      volatileLockHeld.set(null);
      unlockWord(o);
      return;
    }
    // preVolatile found the object white, and it turned persistent before this store landed:
    // its copier may have read the old value. Write the replica from the object now.
    if (word(o) == 0) return;
    int slot = Layout.of(o.getClass()).slotOf(fieldId);
    if (slot < 0) return;
    Layout.Slot sl = Layout.of(o.getClass()).slots[slot];
    long target = 0;
    if (sl.code() == 'L') {
      Object v = Unsafes.U.getObjectVolatile(o, sl.offset());
      if (v != null) target = persistLocked(v);
    }
    if (!lockWord(o)) return;
    try {
      long bits = sl.code() == 'L' ? target : Layout.readBits(o, sl);
      writeWord(addressOf(word(o)) + HeapFormat.HEADER + 8L * slot, bits, sl.code() == 'L');
    } finally {
      unlockWord(o);
    }
  }

  /** make_persistent under the heap lock. */
  private long persistLocked(Object v) {
    lock.lock();
    try {
      return persist(v);
    } finally {
      lock.unlock();
    }
  }

  /** Takes the per-object lock (bit 0 of the word); false if the object is white. */
  private boolean lockWord(Object o) {
    while (true) {
      long w = word(o);
      if (w == 0) return false;
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

  /** The object whose volatile-store lock this thread holds (between pre and post). */
  private final ThreadLocal<Object> volatileLockHeld = new ThreadLocal<>();

  @Override
  public void storePrimitive(Object array, int index, long bits) {
    if (word(array) == 0) return;
    WriterEpochs.State st = epochs.enter();
    try {
      long w = word(array);
      if (w == 0) return;
      Layout layout = Layout.of(array.getClass());
      int es = layout.elementSize;
      long at = addressOf(w) + HeapFormat.HEADER + (long) index * es;
      boolean inSection = logs.beforeWrite(at & ~7L, false);
      long off = space.off(at);
      switch (es) {
        case 1 -> medium.putByte(off, (byte) bits);
        case 2 -> medium.putShort(off, (short) bits);
        case 4 -> medium.putInt(off, (int) bits);
        default -> medium.putLong(off, bits);
      }
      medium.flush(off, es);
      if (!inSection) medium.drain();
    } finally {
      WriterEpochs.exit(st);
    }
  }

  @Override
  public void storeReference(Object[] array, int index, Object value) {
    if (word(array) == 0) return;
    lock.lock();
    try {
      long w = word(array);
      if (w == 0) return;
      long target = value == null ? 0 : persist(value);
      writeWord(addressOf(w) + HeapFormat.HEADER + 8L * index, target, true);
    } finally {
      lock.unlock();
    }
  }

  @Override
  public void copied(Object dst, int dstPos, int length) {
    if (length <= 0) return;
    if (word(dst) == 0) return;
    if (length == 1) {
      copiedRange(dst, dstPos, length);
      return;
    }
    // One System.arraycopy is one failure-atomic section: all its elements or none.
    int token = logs.enter();
    try {
      copiedRange(dst, dstPos, length);
    } finally {
      logs.exit(token);
    }
  }

  private void copiedRange(Object dst, int dstPos, int length) {
    Layout layout = Layout.of(dst.getClass());
    if (layout.elementCode == 'L') {
      lock.lock();
      try {
        long w = word(dst);
        if (w == 0) return;
        Object[] a = (Object[]) dst;
        long body = addressOf(w) + HeapFormat.HEADER;
        boolean inSection = false;
        for (int i = dstPos; i < dstPos + length; i++) {
          Object v = a[i];
          long at = body + 8L * i;
          inSection = logs.beforeWrite(at, true);
          space.putLong(at, v == null ? 0 : persist(v));
        }
        space.flush(body + 8L * dstPos, 8L * length);
        if (!inSection) space.drain();
      } finally {
        lock.unlock();
      }
      return;
    }
    WriterEpochs.State st = epochs.enter();
    try {
      long w = word(dst);
      if (w == 0) return;
      int es = layout.elementSize;
      long first = addressOf(w) + HeapFormat.HEADER + (long) dstPos * es;
      long end = first + (long) length * es;
      boolean inSection = false;
      for (long at = first & ~7L; at < end; at += 8) inSection = logs.beforeWrite(at, false);
      for (int from = dstPos; from < dstPos + length; from += ARRAY_BATCH) {
        int len = Math.min(ARRAY_BATCH, dstPos + length - from);
        byte[] bytes = ArrayBytes.toBytes(dst, layout.elementCode, from, len);
        medium.put(space.off(addressOf(w) + HeapFormat.HEADER + (long) from * es), bytes, 0, bytes.length);
      }
      space.flush(first, end - first);
      if (!inSection) space.drain();
    } finally {
      WriterEpochs.exit(st);
    }
  }

  @Override
  public int faseEnter(Object receiver) {
    if (receiver == null || word(receiver) == 0) return 0;
    return logs.enter();
  }

  @Override
  public void faseExit(int token) {
    logs.exit(token);
  }

  @Override
  public void cloned(Object copy) {
    // Barrier already cleared the copy's word; nothing else refers to it.
  }

  // ---------------------------------------------------------------- roots

  private static String rootName(String binaryClassName, String field) {
    return binaryClassName + "#" + field;
  }

  @Override
  public void putRoot(Object value, int rootId) {
    FieldIds.FieldRef f = FieldIds.ROOTS.get(rootId);
    String owner = f.owner().replace('/', '.');
    lock.lock();
    try {
      // During <clinit> the class's roots are not declared yet: the end of <clinit> decides
      // between the recovered graph and the value the initializer left.
      if (!readyRootClasses.contains(owner)) return;
      ensureRecovered(Thread.currentThread().getContextClassLoader());
      setRoot(rootName(owner, f.name()), value);
    } catch (HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    } finally {
      lock.unlock();
    }
  }

  private void setRoot(String name, Object value) throws HeapException {
    long slot = roots.slot(name);
    long target = value == null ? 0 : persist(value);
    logs.beforeWrite(HeapFormat.address(0, slot - space.off(0)), true);
    medium.putLong(slot, target);
    medium.persist(slot, 8);
  }

  @Override
  public void rootsDeclared(Class<?> c) {
    lock.lock();
    try {
      if (readyRootClasses.contains(c.getName())) return;
      ensureRecovered(c.getClassLoader());
      for (Field f : c.getDeclaredFields()) {
        if (!f.isAnnotationPresent(DurableRoot.class)) continue;
        if (!Modifier.isStatic(f.getModifiers()) || f.getType().isPrimitive()) continue;
        String name = rootName(c.getName(), f.getName());
        long base = Unsafes.U.staticFieldOffset(f);
        Object holder = Unsafes.U.staticFieldBase(f);
        if (roots.get(name) != 0) {
          Object graph = recoveredGraphs(c.getClassLoader()).get(name);
          if (graph != null && !f.getType().isInstance(graph)) {
            throw new PersistenceException(
                "durable root " + name + " holds a " + graph.getClass().getName()
                    + " but is now declared " + f.getType().getName()
                    + ": restore the declaration or start with a new pool");
          }
          Unsafes.U.putObjectVolatile(holder, base, graph);
        } else {
          Object v = Unsafes.U.getObjectVolatile(holder, base);
          if (v != null) setRoot(name, v);
        }
      }
      readyRootClasses.add(c.getName());
    } catch (HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    } finally {
      lock.unlock();
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
    if (recoveredBuilt) return;
    if (marksAtOpen == null) {
      recoveredBuilt = true;
      return;
    }
    try {
      recoveredRoots = new HeapRecovery(this, first, marksAtOpen).run();
    } catch (HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    }
    marksAtOpen = null;
    recoveredBuilt = true;
  }

  /**
   * Rebuilds the heap's objects now if every class it needs can be loaded through
   * {@code loader} (at start-up, so a heap that cannot be recovered stops the program before
   * it runs); leaves it for the first use of the heap if a class is missing there (it may
   * come from a class loader the program creates later).
   */
  public void recoverEagerly(ClassLoader loader) throws HeapException {
    lock.lock();
    try {
      ensureRecovered(loader);
    } catch (PersistenceException e) {
      if (e.getCause() instanceof HeapException he) {
        if (he.reason() == HeapException.Reason.MISSING_CLASS) return;
        throw he;
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

  /** Called by recovery before adopting {@code n} objects. */
  void beginAdoption(int n) {
    activate();
    side.reserve(n);
  }

  /** Called by recovery for every rebuilt object: it is persistent, with this replica. */
  void adopt(Object o, long addr) {
    if (o instanceof Persistent p) {
      p.$kioku$r(addr); // a new object: nothing else can see it yet
      side.register(o);
    } else if (o instanceof Enum<?>) {
      setWord(o, addr); // a constant, not a new object: it may be listed already
    } else {
      side.add(o).word = addr;
    }
  }

  // ---------------------------------------------------------------- marking and GC

  /** Every replica reachable from the roots and the open undo logs, checked as it goes. */
  Marks markLive() throws HeapException {
    Marks live = new Marks(space);
    long[] stack = new long[1024];
    int sp = 0;
    List<Long> starts = new ArrayList<>(roots.all().values());
    logs.forEachLoggedReference(starts::add);
    for (long v : starts) {
      if (v == 0) continue;
      if (sp == stack.length) stack = java.util.Arrays.copyOf(stack, sp * 2);
      stack[sp++] = v;
    }
    boolean[][] refSlots = new boolean[classes.size() + 1][];
    while (sp > 0) {
      long addr = stack[--sp];
      if (!space.valid(addr, HeapFormat.HEADER)) throw damagedAt(addr, "points outside the heap");
      if (live.contains(addr)) continue;
      long header = space.getLong(addr);
      int cid = (int) header;
      long count = header >>> 32;
      ClassTable.Descriptor d = classes.get(cid);
      if (d == null) throw damagedAt(addr, "names class " + cid + " which the class table lacks");
      if (!space.valid(addr, d.replicaSize(count))) throw damagedAt(addr, "runs past its heap space");
      live.mark(addr);
      long body = addr + HeapFormat.HEADER;
      if (d.kind() == Layout.Kind.OBJECT) {
        boolean[] refs = refSlots[cid];
        if (refs == null) refs = refSlots[cid] = d.referenceSlots();
        if (refs.length != count) throw damagedAt(addr, "has " + count + " slots, its class " + refs.length);
        for (int i = 0; i < count; i++) {
          if (!refs[i]) continue;
          long v = space.getLong(body + 8L * i);
          if (v == 0) continue;
          if (sp == stack.length) stack = java.util.Arrays.copyOf(stack, sp * 2);
          stack[sp++] = v;
        }
      } else if (d.kind() == Layout.Kind.ARRAY && d.elementCode() == 'L') {
        for (long i = 0; i < count; i++) {
          long v = space.getLong(body + 8L * i);
          if (v == 0) continue;
          if (sp == stack.length) stack = java.util.Arrays.copyOf(stack, sp * 2);
          stack[sp++] = v;
        }
      }
    }
    live.rank();
    return live;
  }

  private static HeapException damagedAt(long addr, String what) {
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

  /** GC when the heap is mostly full and has grown since the last one. Lock held. */
  private void maybeCollect() {
    long cap = alloc.capacityBytes();
    long used = alloc.usedBytes();
    if (used > cap * 0.9 && used > liveAtLastGc * 1.25) {
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
      Marks live = markLive();
      side.forEachLive(
          o -> {
            long w = word(o);
            if (w != 0 && !live.contains(addressOf(w))) clearWord(o);
          });
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
   * primitive field and element equal, each reference pointing at the referent's replica.
   * Returns one line per difference (empty: they agree). For tests and diagnostics; the
   * program should not be writing the graph meanwhile.
   */
  public List<String> verify(Object root) {
    List<String> bad = new ArrayList<>();
    java.util.IdentityHashMap<Object, Boolean> seen = new java.util.IdentityHashMap<>();
    ArrayDeque<Object> work = new ArrayDeque<>();
    if (root != null) work.add(root);
    VarHandle.fullFence();
    while (!work.isEmpty() && bad.size() < 100) {
      Object o = work.pollFirst();
      if (seen.put(o, Boolean.TRUE) != null) continue;
      long w = word(o);
      if (w == 0) {
        bad.add(describe(o) + " is reachable but has no replica");
        continue;
      }
      long addr = addressOf(w);
      Class<?> c = o instanceof Enum<?> e ? e.getDeclaringClass() : o.getClass();
      Layout layout = Layout.of(c);
      long body = addr + HeapFormat.HEADER;
      switch (layout.kind) {
        case OBJECT -> {
          for (int i = 0; i < layout.slots.length; i++) {
            Layout.Slot sl = layout.slots[i];
            long got = space.getLong(body + 8L * i);
            if (sl.code() == 'L') {
              Object v = Unsafes.U.getObject(o, sl.offset());
              long want = v == null ? 0 : addressOf(word(v));
              if (got != want) bad.add(describe(o) + "." + sl.field().getName() + ": replica points elsewhere");
              if (v != null) work.addLast(v);
            } else if (got != Layout.readBits(o, sl)) {
              bad.add(describe(o) + "." + sl.field().getName() + ": replica " + got + ", object " + Layout.readBits(o, sl));
            }
          }
        }
        case ARRAY -> {
          int n = Array.getLength(o);
          if ((space.getLong(addr) >>> 32) != n) bad.add(describe(o) + ": replica length differs");
          if (layout.elementCode == 'L') {
            for (int i = 0; i < n; i++) {
              Object v = ((Object[]) o)[i];
              long want = v == null ? 0 : addressOf(word(v));
              if (space.getLong(body + 8L * i) != want) bad.add(describe(o) + "[" + i + "]: replica points elsewhere");
              if (v != null) work.addLast(v);
            }
          } else {
            byte[] want = ArrayBytes.toBytes(o, layout.elementCode, 0, n);
            byte[] got = new byte[want.length];
            medium.get(space.off(body), got, 0, got.length);
            if (!java.util.Arrays.equals(want, got)) bad.add(describe(o) + ": replica elements differ");
          }
        }
        default -> {
          // strings and enum constants do not change
        }
      }
    }
    return bad;
  }

  private static String describe(Object o) {
    return o.getClass().getName() + "@" + Integer.toHexString(System.identityHashCode(o));
  }

  public Stats stats() {
    lock.lock();
    try {
      return new Stats(side.size(), alloc.usedBytes(), alloc.capacityBytes(), classes.size(), gcRuns);
    } finally {
      lock.unlock();
    }
  }

  /** Runs {@code action} as one failure-atomic section of this thread. */
  public void atomically(Runnable action) {
    int token = logs.enter();
    try {
      action.run();
    } finally {
      logs.exit(token);
    }
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
      pool.close();
    } finally {
      lock.unlock();
    }
  }
}
