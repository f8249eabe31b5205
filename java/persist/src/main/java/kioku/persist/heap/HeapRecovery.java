package kioku.persist.heap;

import java.lang.reflect.Array;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import kioku.persist.pool.ScanReads;
import kioku.persist.rt.Persistent;

/**
 * Rebuilds the DRAM objects of every replica reachable from the roots (the thesis's recovery):
 * load each class by name and check its fields against the descriptor; allocate every object
 * without running a constructor; fill the fields, translating replica addresses to the new
 * objects; make each object persistent with its existing replica. Nothing is written to the
 * pool, so a crash during recovery leaves the heap as it was.
 */
final class HeapRecovery {
  private final PersistentHeap heap;
  private final ClassLoader first;
  private final HeapSpace space;
  private final Marks live;
  private Resolved[] resolved = new Resolved[16]; // by class id
  private final Progress progress;

  /**
   * A descriptor bound to the class of this JVM. {@code stale}: the class gained or reordered
   * fields since, so its objects move to replicas of the current layout ({@code added}: the
   * fields their replicas lack).
   */
  private record Resolved(
      ClassTable.Descriptor d,
      Class<?> type,
      Layout layout,
      int[] slotMap,
      Object[] constants,
      boolean stale,
      List<Layout.Slot> added,
      boolean table) {}

  HeapRecovery(PersistentHeap heap, ClassLoader first, Marks live) {
    this.heap = heap;
    this.first = first;
    this.space = heap.space();
    this.live = live;
    this.progress = new Progress("recovering");
  }

  /** Words of a replica read with its header (a small object's: all of them). */
  private static final int HEAD = 8;

  /**
   * Replicas below which one thread rebuilds everything (a second is not worth starting);
   * tests lower it to run the two-thread pass on small heaps.
   */
  static int parallelMin = 1 << 16;

  /** System property: {@code 1} keeps recovery on the recovering thread alone. */
  static final String THREADS_PROPERTY = "kioku.persist.recoveryThreads";

  /** Threads the last recovery in this JVM used (for tests). */
  static volatile int lastThreads;

  /**
   * Rebuilds every replica the marks found, in address order; returns each root's graph. One
   * pass over the replicas: each object is created (and adopted: a fresh object takes its
   * replica word as it is made) when first needed, and filled in address order; shared
   * instances and objects of changed classes are adopted or moved after the fill.
   *
   * <p>On a machine with more than one processor, two threads share the pass: they take the
   * heap's 4 MiB chunks in turn ({@link Marks#forEachIn}), each filling the replicas of its
   * chunks. An object is made by whichever thread first needs it (a compare-and-set of its
   * slot in the array of objects by replica number decides), and filled by the thread whose
   * chunk holds its replica. Every replica was checked at open already, and nothing is handed
   * to the program before both threads are done: the graph is published by the caller, after
   * this returns. Every class the replicas name is loaded and initialized here first, on this
   * thread (a class's initializer may use the heap, whose lock this thread holds).
   */
  Map<String, Object> run() throws HeapException {
    return rebuild();
  }

  /** The objects made so far, by replica number ({@link Marks#index}); slots set by CAS. */
  private Object[] objects;

  private static final java.lang.invoke.VarHandle SLOT =
      java.lang.invoke.MethodHandles.arrayElementVarHandle(Object[].class);

  /** Chunks of {@link Marks#forEachIn} handed out so far. */
  private final java.util.concurrent.atomic.AtomicInteger nextChunk =
      new java.util.concurrent.atomic.AtomicInteger();

  /** The first failure of any thread of the pass; the others stop at their next chunk. */
  private volatile Throwable failure;

  private Map<String, Object> rebuild() throws HeapException {
    int total = live.count();
    Object[] objects = new Object[total];
    this.objects = objects;
    heap.beginAdoption();
    boolean parallel = total >= parallelMin && live.maxClass() >= 0
        && Runtime.getRuntime().availableProcessors() > 1 && live.chunks() > 1
        && Integer.getInteger(THREADS_PROPERTY, 2) > 1;
    if (parallel) {
      // Every class a replica names, loaded and initialized on this thread (see run).
      for (int cid = 1; cid <= live.maxClass(); cid++) {
        if (!live.usesClass(cid)) continue;
        Resolved r = resolve(cid);
        if (r.type != null && r.d.kind() == Layout.Kind.OBJECT) initialize(r.type);
      }
    }
    Worker[] workers = parallel ? new Worker[] {new Worker(2), new Worker(2)} : new Worker[] {new Worker(1)};
    java.util.IdentityHashMap<Object, Boolean> stale;
    long[] listedBits;
    List<Object> tables = new java.util.ArrayList<>();
    try {
      Thread helper = null;
      if (parallel) {
        helper = new Thread(workers[1]::runGuarded, "kioku-persist recovery");
        helper.setDaemon(true);
        helper.setContextClassLoader(Thread.currentThread().getContextClassLoader());
        try {
          helper.start();
        } catch (OutOfMemoryError e) {
          helper = null; // no thread to be had: this one takes every chunk
        }
      }
      workers[0].runGuarded();
      if (helper != null) joinUninterruptibly(helper);
      lastThreads = helper != null ? 2 : 1;
      Throwable f = failure;
      if (f instanceof HeapException he) throw he;
      if (f instanceof RuntimeException re) throw re;
      if (f instanceof Error er) throw er;
      if (f != null) throw new IllegalStateException("recovery failed", f); // no other kind
      // The workers' lists, in the order of their threads; the bits of listed objects merged.
      Later later = new Later();
      listedBits = workers[0].listed;
      for (Worker w : workers) {
        for (int j = 0; j < w.later.count; j++) {
          later.add(w.later.indexes[j], w.later.addrs[j], w.later.classIds[j]);
        }
        tables.addAll(w.tables);
        if (w.listed != listedBits) {
          for (int k = 0; k < listedBits.length; k++) listedBits[k] |= w.listed[k];
        }
      }
      stale = new java.util.IdentityHashMap<>();
      for (int j = 0; j < later.count; j++) {
        long addr = later.addrs[j];
        Object o = objects[later.indexes[j]];
        Resolved r = resolved[later.classIds[j]];
        if (r.stale) {
          stale.put(o, Boolean.TRUE);
          // An enum constant is the running one: its added fields are initialized already.
          if (!r.type.isEnum()) FieldInitializers.run(o, r.type, r.added);
        } else if (heap.adopt(o, addr)) {
          int i = later.indexes[j];
          listedBits[i >>> 6] |= 1L << i;
        }
      }
    } catch (HeapException | RuntimeException e) {
      // A class that cannot be recovered: the objects made so far are garbage, never listed.
      this.objects = null;
      throw e;
    }
    this.objects = null;
    progress.finish(total);
    Map<String, Object> roots = new LinkedHashMap<>();
    for (Map.Entry<String, Long> r : heap.roots().entrySet()) {
      long v = r.getValue();
      roots.put(r.getKey(), v == 0 ? null : objects[live.index(v)]);
    }
    if (stale.isEmpty()) {
      // Nothing needs the objects by replica number any more: the array becomes the list of
      // those that keep their own word (one array of 18 M references per GB, not two).
      int n = compactListed(objects, listedBits);
      heap.endAdoption(objects, n);
    } else {
      Object[] kept = objects.clone();
      heap.endAdoption(kept, compactListed(kept, listedBits));
      heap.migrate(objects, stale, roots);
    }
    Object[] candidates = tables.toArray();
    List<Object> rehash = Rehash.needing(candidates);
    List<Object> concurrentMaps = ConcurrentMaps.needing(candidates);
    if (!rehash.isEmpty() || !concurrentMaps.isEmpty()) heap.rehash(rehash, concurrentMaps);
    return roots;
  }

  private static void initialize(Class<?> c) throws HeapException {
    try {
      Class.forName(c.getName(), true, c.getClassLoader());
    } catch (ClassNotFoundException e) {
      throw new IllegalStateException(c.getName() + " was loaded and is no longer found", e);
    }
  }

  private static void joinUninterruptibly(Thread t) {
    boolean interrupted = false;
    while (true) {
      try {
        t.join();
        break;
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) Thread.currentThread().interrupt();
  }

  /**
   * Moves the objects whose bit is set to the front of {@code objects}, in order, and clears
   * the rest (the list must not keep objects alive that are not on it); returns their count.
   */
  private static int compactListed(Object[] objects, long[] bits) {
    int n = 0;
    for (int w = 0; w < bits.length; w++) {
      long x = bits[w];
      while (x != 0) {
        objects[n++] = objects[(w << 6) + Long.numberOfTrailingZeros(x)];
        x &= x - 1;
      }
    }
    java.util.Arrays.fill(objects, n, objects.length, null);
    return n;
  }

  /** Replicas adopted after the fill: shared instances, objects of changed classes. */
  private static final class Later {
    int[] indexes = new int[16];
    long[] addrs = new long[16];
    /** Their class ids (not read again from the pool: its pages would stay resident). */
    int[] classIds = new int[16];
    int count;

    void add(int index, long addr, int classId) {
      if (count == indexes.length) {
        indexes = java.util.Arrays.copyOf(indexes, count * 2);
        addrs = java.util.Arrays.copyOf(addrs, count * 2);
        classIds = java.util.Arrays.copyOf(classIds, count * 2);
      }
      indexes[count] = index;
      addrs[count] = addr;
      classIds[count++] = classId;
    }
  }

  /** Lock of {@link #resolve} and of the side table's adoptions by several threads. */
  private final Object resolveLock = new Object();

  /** The resolved descriptor of a class id (resolved now, under the lock, if not yet). */
  private Resolved resolved(int classId) throws HeapException {
    Resolved[] rs = resolved;
    Resolved r = classId >= 0 && classId < rs.length ? rs[classId] : null;
    if (r != null) return r; // a record of final fields: safe to read from another thread
    synchronized (resolveLock) {
      return resolve(classId);
    }
  }

  private Resolved resolve(int classId) throws HeapException {
    if (classId >= resolved.length) resolved = java.util.Arrays.copyOf(resolved, classId * 2);
    Resolved r = resolved[classId];
    if (r != null) return r;
    ClassTable.Descriptor d = heap.classes().get(classId);
    if (d.kind() == Layout.Kind.CANONICAL) {
      r = new Resolved(d, null, null, null, null, false, List.of(), false);
      resolved[classId] = r;
      return r;
    }
    Class<?> c = load(d.name());
    Layout layout = Layout.of(c);
    if (layout.kind != d.kind()) {
      throw incompatible(d.name() + " was a " + d.kind() + " and is now a " + layout.kind);
    }
    if (layout.refusal != null) throw incompatible(layout.refusal);
    int[] slotMap = null;
    Object[] constants = null;
    if (d.kind() == Layout.Kind.OBJECT || d.kind() == Layout.Kind.ENUM) {
      Map<String, Integer> now = new HashMap<>();
      Map<String, String> nowType = new HashMap<>();
      for (int i = 0; i < layout.slots.length; i++) {
        String key = layout.slots[i].key();
        now.put(key, i);
        nowType.put(key.substring(0, key.lastIndexOf(':')), key);
      }
      slotMap = new int[d.slots().size()];
      for (int j = 0; j < slotMap.length; j++) {
        String key = d.slots().get(j);
        Integer i = now.get(key);
        if (i == null) {
          String field = key.substring(0, key.lastIndexOf(':'));
          String changed = nowType.get(field);
          throw incompatible(
              changed == null
                  ? "field " + field + " (" + key.substring(key.lastIndexOf(':') + 1)
                      + ") no longer exists"
                  : "field " + field + " changed type from "
                      + key.substring(key.lastIndexOf(':') + 1) + " to "
                      + changed.substring(changed.lastIndexOf(':') + 1));
        }
        slotMap[j] = i;
      }
    }
    if (d.kind() == Layout.Kind.ENUM) {
      List<String> names = d.constants();
      constants = new Object[names.size()];
      Object[] current = c.getEnumConstants();
      for (int j = 0; j < names.size(); j++) {
        for (Object e : current) if (((Enum<?>) e).name().equals(names.get(j))) constants[j] = e;
        // A removed constant fails only if a replica uses it (see create).
      }
    }
    boolean stale = false;
    List<Layout.Slot> added = new java.util.ArrayList<>();
    if (slotMap != null) {
      boolean[] kept = new boolean[layout.slots.length];
      for (int j = 0; j < slotMap.length; j++) {
        kept[slotMap[j]] = true;
        if (slotMap[j] != j) stale = true;
      }
      for (int i = 0; i < kept.length; i++) if (!kept[i]) added.add(layout.slots[i]);
      stale |= !added.isEmpty();
    }
    r = new Resolved(d, c, layout, slotMap, constants, stale, List.copyOf(added), Rehash.mayNeed(c));
    resolved[classId] = r;
    return r;
  }

  private HeapException incompatible(String what) {
    return new HeapException(
        HeapException.Reason.INCOMPATIBLE_CLASS,
        "cannot recover the persistent heap: " + what
            + "; restore the class's previous version, or start with a new pool");
  }

  private Class<?> load(String name) throws HeapException {
    ClassLoader[] loaders = {
      first, Thread.currentThread().getContextClassLoader(), ClassLoader.getSystemClassLoader()
    };
    for (ClassLoader l : loaders) {
      try {
        return Class.forName(name, false, l);
      } catch (ClassNotFoundException | LinkageError e) {
        // try the next loader
      }
    }
    throw new HeapException(
        HeapException.Reason.MISSING_CLASS,
        "cannot recover the persistent heap: class " + name
            + " is not on the class path; run with the classes the heap was written by");
  }

  private Class<?> loadOrNull(String name) {
    try {
      return load(name);
    } catch (HeapException e) {
      return null;
    }
  }

  /**
   * One thread's share of the pass: its own reader of the pool, buffer and lists. The
   * shared state is the array of objects (slots set by CAS) and the resolved classes.
   */
  private final class Worker {
    /** Reads the replicas: its own mappings, unmapped as it moves on ({@link ScanReads}). */
    private ScanReads medium;

    private final int readers;

    /** Replicas adopted after the fill: see {@link #run}. */
    final Later later = new Later();

    /** Hash tables, whose buckets may need rebuilding (identity hashes differ in this JVM). */
    final List<Object> tables = new java.util.ArrayList<>();

    /** Replica numbers whose objects {@link PersistentHeap#adopt} said to list, one bit each. */
    final long[] listed = new long[(live.count() + 63) >>> 6];

    /**
     * Objects of this thread's chunk to adopt through the side table (not {@code Persistent}:
     * their word lives there), by replica number: adopted together under one lock per chunk
     * instead of a contended lock per object.
     */
    private int[] toAdopt = new int[64];

    private long[] toAdoptAddrs = new long[64];
    private int toAdoptCount;

    Worker(int readers) {
      this.readers = readers;
    }

    /** Takes chunks until none is left or a thread failed; records a failure for the caller. */
    void runGuarded() {
      try {
        medium = space.medium.scanReads(readers);
        int chunks = live.chunks();
        int total = live.count();
        Marks.Visitor pass =
            (i, addr) -> {
              long header = head(addr);
              Resolved r = resolved((int) header);
              Object o = readers == 1 ? objects[i] : (Object) SLOT.getAcquire(objects, i);
              if (o == null) o = make(i, addr, header, r);
              fill(addr, o, r);
            };
        for (int c; failure == null && (c = nextChunk.getAndIncrement()) < chunks; ) {
          live.forEachIn(c, pass);
          adoptPending();
          synchronized (progress) {
            progress.show((long) total * (c + 1) / chunks, total);
          }
        }
      } catch (Throwable t) {
        synchronized (resolveLock) {
          if (failure == null) failure = t;
        }
      } finally {
        if (medium != null) medium.close();
      }
    }

    private long header(long addr) {
      return medium.getLong(space.off(addr));
    }

    /** How many of the replica's first words {@link #head} left in {@link #words}. */
    private int ahead;

    /**
     * The header of the replica at {@code addr}, read with the words after it (up to {@link
     * #HEAD}) into {@link #words} for {@link #fill}: one read per small replica, not two.
     */
    private long head(long addr) {
      if (!space.valid(addr, 8L * HEAD)) {
        ahead = 0;
        return header(addr);
      }
      medium.getLongs(space.off(addr), words, 0, HEAD);
      ahead = HEAD;
      return words[0];
    }

    /**
     * Makes (and adopts, or lists for later) the object of replica number {@code i}, unless
     * another thread made it first: returns the one in the array.
     */
    private Object make(int i, long addr, long header, Resolved r) throws HeapException {
      Object o = create(addr, header, r);
      if (readers == 1) {
        objects[i] = o; // alone: nothing else makes objects
      } else {
        Object other = SLOT.compareAndExchange(objects, i, null, o);
        if (other != null) return other; // the other thread's: ours is garbage, never adopted
      }
      if (r.table || (r.type == null && Rehash.mayNeed(o.getClass()))) tables.add(o);
      Layout.Kind k = r.d.kind();
      if (r.stale || k == Layout.Kind.ENUM || k == Layout.Kind.CANONICAL) {
        later.add(i, addr, (int) header);
      } else if (o instanceof Persistent) {
        // A new object: nothing else can see it yet.
        if (heap.adopt(o, addr)) listed[i >>> 6] |= 1L << i;
      } else {
        if (toAdoptCount == toAdopt.length) {
          toAdopt = java.util.Arrays.copyOf(toAdopt, 2 * toAdoptCount);
          toAdoptAddrs = java.util.Arrays.copyOf(toAdoptAddrs, 2 * toAdoptCount);
        }
        toAdopt[toAdoptCount] = i;
        toAdoptAddrs[toAdoptCount++] = addr;
      }
      return o;
    }

    private void adoptPending() {
      if (toAdoptCount == 0) return;
      synchronized (resolveLock) {
        for (int j = 0; j < toAdoptCount; j++) {
          int i = toAdopt[j];
          if (heap.adopt(objects[i], toAdoptAddrs[j])) listed[i >>> 6] |= 1L << i;
        }
      }
      toAdoptCount = 0;
    }

    /** The object of the replica at {@code v} (non-zero), made now if not yet. */
    private Object object(long v) throws HeapException {
      int j = live.index(v);
      Object o = readers == 1 ? objects[j] : (Object) SLOT.getAcquire(objects, j);
      if (o != null) return o;
      long header = header(v);
      return make(j, v, header, resolved((int) header));
    }

    private Object create(long addr, long header, Resolved r) throws HeapException {
      int count = (int) (header >>> 32);
      long body = addr + HeapFormat.HEADER;
      switch (r.d.kind()) {
        case OBJECT:
          try {
            return Unsafes.U.allocateInstance(r.type);
          } catch (InstantiationException e) {
            throw incompatible(r.type.getName() + " cannot be instantiated: " + e.getMessage());
          }
        case ARRAY:
          return Array.newInstance(r.type.getComponentType(), count);
        case STRING:
          {
            long at = space.off(body);
            byte coder = medium.getByte(at);
            byte[] bytes = new byte[count];
            medium.get(at + 1, bytes, 0, count);
            return Strings.of(bytes, coder);
          }
        case ENUM:
          {
            long ordinal = medium.getLong(space.off(body));
            if (ordinal < 0 || ordinal >= r.constants.length) {
              throw new HeapException(
                  HeapException.Reason.DAMAGED,
                  "persistent heap damaged: enum " + r.type.getName() + " ordinal " + ordinal);
            }
            Object c = r.constants[(int) ordinal];
            if (c == null) {
              throw incompatible(
                  "enum constant " + r.type.getName() + "." + r.d.constants().get((int) ordinal)
                      + " no longer exists");
            }
            return c;
          }
        case CANONICAL:
          {
            long value = count > 0 ? medium.getLong(space.off(body)) : 0;
            Object c = Canonicals.resolve(r.d.name(), value, HeapRecovery.this::loadOrNull);
            if (c == null) {
              throw incompatible("this JVM has no shared instance " + r.d.name());
            }
            return c;
          }
        default:
          throw new IllegalStateException();
      }
    }

    private static final int BATCH = 8192;

    /** The fields' words of the object {@link #fill} is filling. */
    private long[] words = new long[64];

    /** Arrays up to this many bytes are read element by element (no temporary buffer). */
    private static final int SMALL_ARRAY = 256;

    private void fill(long addr, Object o, Resolved r) throws HeapException {
      long body = addr + HeapFormat.HEADER;
      switch (r.d.kind()) {
        case OBJECT, ENUM -> {
          Layout.Slot[] slots = r.layout.slots;
          int[] map = r.slotMap;
          int first = 3 + (r.d.kind() == Layout.Kind.ENUM ? 1 : 0); // word of the first field
          long[] w = words;
          int base = first;
          if (first + map.length > ahead) { // not all read with the header: one bulk read
            if (w.length < map.length) w = words = new long[Math.max(map.length, 2 * w.length)];
            medium.getLongs(space.off(addr) + 8L * first, w, 0, map.length);
            base = 0;
          }
          ahead = 0; // the words are this replica's only until the next read
          for (int j = 0; j < map.length; j++) {
            Layout.Slot s = slots[map[j]];
            long v = w[base + j];
            if (s.code() == 'L') {
              Unsafes.U.putObject(o, s.offset(), v == 0 ? null : object(v));
            } else {
              Layout.writeBits(o, s, v);
            }
          }
        }
        case ARRAY -> {
          int n = Array.getLength(o);
          char code = r.layout.elementCode;
          long at = space.off(body);
          if (code == 'L') {
            Object[] a = (Object[]) o;
            for (int i = 0; i < n; i++) {
              long v = medium.getLong(at + 8L * i);
              a[i] = v == 0 ? null : object(v);
            }
            return;
          }
          int es = r.layout.elementSize;
          if ((long) n * es <= SMALL_ARRAY) {
            fillSmall(o, code, n, at);
            return;
          }
          for (int from = 0; from < n; from += BATCH) {
            int len = Math.min(BATCH, n - from);
            byte[] bytes = new byte[len * es];
            medium.get(at + (long) from * es, bytes, 0, bytes.length);
            ArrayBytes.fromBytes(bytes, o, code, from, len);
          }
        }
        default -> {
          // strings and canonical instances are complete when created
        }
      }
    }

    private void fillSmall(Object o, char code, int n, long at) {
      switch (code) {
        case 'Z' -> {
          boolean[] a = (boolean[]) o;
          for (int i = 0; i < n; i++) a[i] = medium.getByte(at + i) != 0;
        }
        case 'B' -> {
          byte[] a = (byte[]) o;
          for (int i = 0; i < n; i++) a[i] = medium.getByte(at + i);
        }
        case 'C' -> {
          char[] a = (char[]) o;
          for (int i = 0; i < n; i++) a[i] = (char) medium.getShort(at + 2L * i);
        }
        case 'S' -> {
          short[] a = (short[]) o;
          for (int i = 0; i < n; i++) a[i] = medium.getShort(at + 2L * i);
        }
        case 'I' -> {
          int[] a = (int[]) o;
          for (int i = 0; i < n; i++) a[i] = medium.getInt(at + 4L * i);
        }
        case 'F' -> {
          float[] a = (float[]) o;
          for (int i = 0; i < n; i++) a[i] = Float.intBitsToFloat(medium.getInt(at + 4L * i));
        }
        case 'J' -> {
          long[] a = (long[]) o;
          for (int i = 0; i < n; i++) a[i] = medium.getLong(at + 8L * i);
        }
        case 'D' -> {
          double[] a = (double[]) o;
          for (int i = 0; i < n; i++) a[i] = Double.longBitsToDouble(medium.getLong(at + 8L * i));
        }
        default -> throw new IllegalArgumentException("not a primitive array: " + code);
      }
    }
  }
}
