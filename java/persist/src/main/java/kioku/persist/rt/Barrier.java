package kioku.persist.rt;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MutableCallSite;
import java.lang.invoke.VarHandle;

/**
 * The entry points the agent's instrumentation calls. Reads are never instrumented; every
 * write that can reach a persistent object calls one of these after the ordinary store.
 *
 * <p>The fast path is one volatile read ({@link #active}) while nothing is persistent. Once
 * something is, the writer reads the written object's replica word: a field of an instrumented
 * object; for anything else, its identity hash first ({@link IdentityHashes#peek}) — an object
 * that has none cannot have a replica, and most arrays and JDK objects written never get one.
 *
 * <p>A store into a primitive array first tests a filter of classes ({@link #SIDE_CLASSES}):
 * while no {@code int[]} is persistent, a store into an {@code int[]} ends on one load of the
 * filter (a constant offset and mask), without the fence flag or the array's header; in code
 * C2 compiled, on nothing at all (the call sites per primitive array class, below). Object
 * arrays and JDK objects are not filtered: their class is known only at run time, and reaching
 * its identity hash (object, class, mirror, mirror's header) cost more than the header read it
 * saves (WriteBench: a store into an {@code Object[]} 5.1 → 8.5 ns when tried).
 *
 * <p>While a make_persistent may be running ({@link #fenced}), the writer also fences before
 * that read: the object may be made persistent by another thread between the store and the
 * read, and the copier's copy-then-verify needs the store visible by the time the word says
 * "replica" (the thesis's MFENCE). Outside those periods the fence is not needed, and writers
 * skip it: the runtime sets {@code fenced} and then brings every thread through a safepoint
 * before the next make_persistent copies anything, so a writer that read {@code fenced ==
 * false} has its store visible before the copy starts (an asymmetric Dekker protocol, the
 * expensive side taken by the rare make_persistent; see heap.WriterFences). The volatile read
 * of {@code active} between the store and the word's read keeps the JIT from moving the read
 * above the store.
 */
public final class Barrier {
  private Barrier() {}

  /** True once anything has been made persistent in this JVM. */
  public static volatile boolean active;

  /**
   * Whether writers fence before reading a replica word: true while a make_persistent may run
   * (and from the start, until the runtime lowers it).
   */
  public static volatile boolean fenced = true;

  /**
   * Report stores into objects without an identity hash too (which cannot be persistent):
   * for tests of the instrumentation, whose recording hooks want to see every store.
   */
  public static boolean reportUnhashed;

  /** The runtime; set before {@link #active} becomes true. */
  public static volatile Hooks hooks;

  /**
   * A filter of the classes of objects that are not instrumented (arrays, JDK objects) and may
   * have a replica word in the runtime's side table: 1,024 bits, bit {@code
   * System.identityHashCode(c) & 1023} set for each such class {@code c} before any instance of
   * it gets a word, and never cleared. A store into an object whose class's bit is clear needs
   * nothing more: the object cannot be persistent (tested for primitive arrays only, see above). (64 bits were too few: with a persistent
   * HashMap of strings, {@code boolean[]} and {@code Integer} each shared a bit with one of its
   * four classes in one run.) Why a clear bit needs no fence: the runtime sets the bit, then
   * brings every thread through a safepoint, and only then gives an instance a word (see {@link
   * #addSideClass}); a writer that read the bit clear did so before that safepoint, so its store,
   * made before the read, is visible to the copy that follows, as with {@link #active}. The bits
   * are read volatile (one plain load on x86) so that a loop does not keep an old value.
   */
  private static final long[] SIDE_CLASSES = new long[16];

  private static final long SIDE_CLASSES_BASE = IdentityHashes.U.arrayBaseOffset(long[].class);

  private static final Object SIDE_CLASSES_LOCK = new Object();

  /**
   * Lets instances of {@code c} pass the class filter. Returns true if that changed the filter:
   * the caller must then bring every thread through a safepoint before any instance of {@code
   * c} gets a replica word.
   */
  public static boolean addSideClass(Class<?> c) {
    int h = System.identityHashCode(c);
    long at = sideClassesWord(h);
    synchronized (SIDE_CLASSES_LOCK) {
      long now = IdentityHashes.U.getLongVolatile(SIDE_CLASSES, at);
      if ((now & (1L << h)) != 0) return false;
      IdentityHashes.U.putLongVolatile(SIDE_CLASSES, at, now | (1L << h));
      openPrimitiveSites(h);
      return true;
    }
  }

  // One call site per primitive array class, answering whether a store into such an array may
  // need the barrier's slow path: false (a constant) until the class filter's bit of any of
  // the eight classes that share a bit with it is set. C2 folds a static final invoker of a
  // MutableCallSite into the constant and records a dependency on the site's target, so while
  // no array of the class can be persistent a store into one compiles to no barrier at all: no
  // volatile read in the loop, which then unrolls and vectorizes as without the agent (the
  // volatile read of `active` and of the filter kept C2 from doing either: commons-math, whose
  // loops store into double[], ran +120 % with persistence active). setTarget deoptimizes every
  // compiled method that folded the old target before it returns (a handshake with all threads:
  // a frame inside such a loop is sent to the interpreter at its next safepoint poll), so a
  // writer that skipped the barrier did its store before setTarget returned, and the caller's
  // safepoint that follows (SideTable) orders it before any copy, as with the filter's bit.
  private static final MutableCallSite BYTES_OPEN = closedSite();
  private static final MutableCallSite BOOLEANS_OPEN = closedSite();
  private static final MutableCallSite CHARS_OPEN = closedSite();
  private static final MutableCallSite SHORTS_OPEN = closedSite();
  private static final MutableCallSite INTS_OPEN = closedSite();
  private static final MutableCallSite LONGS_OPEN = closedSite();
  private static final MutableCallSite FLOATS_OPEN = closedSite();
  private static final MutableCallSite DOUBLES_OPEN = closedSite();
  private static final MethodHandle BYTES_MAY = BYTES_OPEN.dynamicInvoker();
  private static final MethodHandle BOOLEANS_MAY = BOOLEANS_OPEN.dynamicInvoker();
  private static final MethodHandle CHARS_MAY = CHARS_OPEN.dynamicInvoker();
  private static final MethodHandle SHORTS_MAY = SHORTS_OPEN.dynamicInvoker();
  private static final MethodHandle INTS_MAY = INTS_OPEN.dynamicInvoker();
  private static final MethodHandle LONGS_MAY = LONGS_OPEN.dynamicInvoker();
  private static final MethodHandle FLOATS_MAY = FLOATS_OPEN.dynamicInvoker();
  private static final MethodHandle DOUBLES_MAY = DOUBLES_OPEN.dynamicInvoker();

  private static final MethodHandle OPEN = MethodHandles.constant(boolean.class, true);

  private static MutableCallSite closedSite() {
    return new MutableCallSite(MethodHandles.constant(boolean.class, false));
  }

  /**
   * After bit {@code h & 1023} of the filter was set: opens the sites of the primitive array
   * classes whose hash selects that bit (called under SIDE_CLASSES_LOCK).
   */
  private static void openPrimitiveSites(int h) {
    MutableCallSite[] sites = {
      BYTES_OPEN, BOOLEANS_OPEN, CHARS_OPEN, SHORTS_OPEN,
      INTS_OPEN, LONGS_OPEN, FLOATS_OPEN, DOUBLES_OPEN
    };
    int[] hashes = {BYTES, BOOLEANS, CHARS, SHORTS, INTS, LONGS, FLOATS, DOUBLES};
    for (int i = 0; i < sites.length; i++) {
      if (((hashes[i] ^ h) & 1023) == 0 && sites[i].getTarget() != OPEN) {
        sites[i].setTarget(OPEN);
        MutableCallSite.syncAll(new MutableCallSite[] {sites[i]});
      }
    }
  }

  /** Whether instances of {@code c} pass the class filter (for tests and statistics). */
  public static boolean passesSideClassFilter(Class<?> c) {
    return sideClassHash(System.identityHashCode(c));
  }

  private static boolean sideClassHash(int h) {
    return (IdentityHashes.U.getLongVolatile(SIDE_CLASSES, sideClassesWord(h)) & (1L << h)) != 0;
  }

  /** The offset of the filter's word holding bit {@code h & 1023} (in it: bit {@code h & 63}). */
  private static long sideClassesWord(int h) {
    return SIDE_CLASSES_BASE + 8L * ((h >>> 6) & 15);
  }

  /**
   * Whether {@code o} may have a replica: an instrumented object's replica word is set; any
   * other object has an identity hash (the runtime looks it up).
   */
  static boolean maybePersistent(Object o) {
    return maybePersistent(o, o instanceof Persistent);
  }

  /**
   * {@link #maybePersistent(Object)} with the type test made by the caller: {@code p} is
   * {@code o instanceof Persistent}, computed at the store site in the instrumented method
   * (see agent.BarrierMethodAdapter), where the JIT profiles each site's types on their own.
   * In a retransformed JDK class {@code p} is the constant false: an instrumented object such
   * code writes (an application subclass of a JDK class) has an identity hash before it has a
   * replica word (heap.SideTable#hashIfJdkWritten), so the hash test below sends it on.
   */
  static boolean maybePersistent(Object o, boolean p) {
    if (fenced) VarHandle.fullFence();
    if (p) return ((Persistent) o).$kioku$r() != 0;
    return o != null && (IdentityHashes.peek(o) != 0 || reportUnhashed);
  }

  /** {@link #maybePersistent(Object)} of an array (never {@code Persistent}). */
  private static boolean maybePersistentArray(Object a) {
    if (fenced) VarHandle.fullFence();
    return IdentityHashes.peek(a) != 0 || reportUnhashed;
  }

  // The identity hashes of the primitive array classes, for the class filter of the stores
  // whose array class is known from the opcode: an identity hash never changes once given, so
  // the filter's test there is one load at a constant offset and a constant mask.
  private static final int BYTES = System.identityHashCode(byte[].class);
  private static final int BOOLEANS = System.identityHashCode(boolean[].class);
  private static final int CHARS = System.identityHashCode(char[].class);
  private static final int SHORTS = System.identityHashCode(short[].class);
  private static final int INTS = System.identityHashCode(int[].class);
  private static final int LONGS = System.identityHashCode(long[].class);
  private static final int FLOATS = System.identityHashCode(float[].class);
  private static final int DOUBLES = System.identityHashCode(double[].class);

  /**
   * {@link #maybePersistentArray} of a primitive array whose class has identity hash {@code
   * classHash} ({@code a}'s class: one of the constants above).
   */
  private static boolean maybePersistentPrimitives(Object a, int classHash) {
    if (!sideClassHash(classHash)) return reportUnhashed;
    if (fenced) VarHandle.fullFence();
    return IdentityHashes.peek(a) != 0 || reportUnhashed;
  }

  /**
   * Before an atomic write (see {@link Atomics}): whether its target may be persistent, so the
   * runtime must make the write durable before it is visible. No fence: a target read white
   * is written at once and checked again after the write ({@link #atomicWrote}).
   */
  static boolean persistentTarget(Object o) {
    if (o instanceof Persistent) return ((Persistent) o).$kioku$r() != 0;
    return o != null && (IdentityHashes.peek(o) != 0 || reportUnhashed);
  }

  /** After an atomic write into an object that was white: it may have turned persistent. */
  static void atomicWrote(Object o, long offset) {
    if (active && maybePersistent(o)) hooks.wroteAt(o, offset);
  }

  public static void putZ(Object o, boolean v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.putPrimitive(o, v ? 1 : 0, id);
  }

  public static void putB(Object o, byte v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.putPrimitive(o, v & 0xffL, id);
  }

  public static void putC(Object o, char v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.putPrimitive(o, v, id);
  }

  public static void putS(Object o, short v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.putPrimitive(o, v & 0xffffL, id);
  }

  public static void putI(Object o, int v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.putPrimitive(o, v & 0xffffffffL, id);
  }

  public static void putJ(Object o, long v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.putPrimitive(o, v, id);
  }

  public static void putF(Object o, float v, int id, boolean p) {
    if (active && maybePersistent(o, p)) {
      hooks.putPrimitive(o, Float.floatToRawIntBits(v) & 0xffffffffL, id);
    }
  }

  public static void putD(Object o, double v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.putPrimitive(o, Double.doubleToRawLongBits(v), id);
  }

  public static void putL(Object o, Object v, Object old, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.putReference(o, v, old, id);
  }

  // Volatile fields: the runtime locks the object and writes the replica first (NVM-first
  // order), then the putfield runs, then postVolatile unlocks.

  public static void preVolatileZ(Object o, boolean v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.preVolatile(o, v ? 1 : 0, null, id);
  }

  public static void preVolatileB(Object o, byte v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.preVolatile(o, v & 0xffL, null, id);
  }

  public static void preVolatileC(Object o, char v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.preVolatile(o, v, null, id);
  }

  public static void preVolatileS(Object o, short v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.preVolatile(o, v & 0xffffL, null, id);
  }

  public static void preVolatileI(Object o, int v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.preVolatile(o, v & 0xffffffffL, null, id);
  }

  public static void preVolatileF(Object o, float v, int id, boolean p) {
    if (active && maybePersistent(o, p)) {
      hooks.preVolatile(o, Float.floatToRawIntBits(v) & 0xffffffffL, null, id);
    }
  }

  public static void preVolatileD(Object o, double v, int id, boolean p) {
    if (active && maybePersistent(o, p)) {
      hooks.preVolatile(o, Double.doubleToRawLongBits(v), null, id);
    }
  }

  public static void preVolatileJ(Object o, long bits, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.preVolatile(o, bits, null, id);
  }

  public static void preVolatileL(Object o, Object v, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.preVolatile(o, 0, v, id);
  }

  public static void postVolatile(Object o, int id, boolean p) {
    if (active && maybePersistent(o, p)) hooks.postVolatile(o, id);
  }

  /** After a putstatic of a {@code @DurableRoot} field (always forwarded: roots are rare). */
  public static void putRoot(Object v, Object old, int rootId) {
    Hooks h = hooks;
    if (h != null) h.putRoot(v, old, rootId);
  }

  /** At the end of {@code <clinit>} of a class with durable roots. */
  public static void rootsDeclared(Class<?> c) {
    Hooks h = hooks;
    if (h != null) h.rootsDeclared(c);
  }

  // Whether a store into a primitive array of each class may need more than the fast path:
  // the folded call sites above, or a test that wants every store reported.

  private static boolean mayB() {
    try {
      return (boolean) BYTES_MAY.invokeExact() || reportUnhashed;
    } catch (Throwable t) {
      throw new AssertionError(t); // a constant handle throws nothing
    }
  }

  private static boolean mayZ() {
    try {
      return (boolean) BOOLEANS_MAY.invokeExact() || reportUnhashed;
    } catch (Throwable t) {
      throw new AssertionError(t); // a constant handle throws nothing
    }
  }

  private static boolean mayC() {
    try {
      return (boolean) CHARS_MAY.invokeExact() || reportUnhashed;
    } catch (Throwable t) {
      throw new AssertionError(t); // a constant handle throws nothing
    }
  }

  private static boolean mayS() {
    try {
      return (boolean) SHORTS_MAY.invokeExact() || reportUnhashed;
    } catch (Throwable t) {
      throw new AssertionError(t); // a constant handle throws nothing
    }
  }

  private static boolean mayI() {
    try {
      return (boolean) INTS_MAY.invokeExact() || reportUnhashed;
    } catch (Throwable t) {
      throw new AssertionError(t); // a constant handle throws nothing
    }
  }

  private static boolean mayJ() {
    try {
      return (boolean) LONGS_MAY.invokeExact() || reportUnhashed;
    } catch (Throwable t) {
      throw new AssertionError(t); // a constant handle throws nothing
    }
  }

  private static boolean mayF() {
    try {
      return (boolean) FLOATS_MAY.invokeExact() || reportUnhashed;
    } catch (Throwable t) {
      throw new AssertionError(t); // a constant handle throws nothing
    }
  }

  private static boolean mayD() {
    try {
      return (boolean) DOUBLES_MAY.invokeExact() || reportUnhashed;
    } catch (Throwable t) {
      throw new AssertionError(t); // a constant handle throws nothing
    }
  }

  // Array stores. bastore serves byte[] and boolean[], so it takes Object.

  public static void storeB(Object a, int i, int v) {
    if (a instanceof byte[] ? !mayB() : !mayZ()) return;
    if (active && maybePersistentPrimitives(a, a instanceof byte[] ? BYTES : BOOLEANS)) {
      hooks.storePrimitive(a, i, v & 0xffL);
    }
  }

  public static void storeC(char[] a, int i, char v) {
    if (mayC() && active && maybePersistentPrimitives(a, CHARS)) hooks.storePrimitive(a, i, v);
  }

  public static void storeS(short[] a, int i, short v) {
    if (mayS() && active && maybePersistentPrimitives(a, SHORTS)) {
      hooks.storePrimitive(a, i, v & 0xffffL);
    }
  }

  public static void storeI(int[] a, int i, int v) {
    if (mayI() && active && maybePersistentPrimitives(a, INTS)) {
      hooks.storePrimitive(a, i, v & 0xffffffffL);
    }
  }

  public static void storeJ(long[] a, int i, long v) {
    if (mayJ() && active && maybePersistentPrimitives(a, LONGS)) hooks.storePrimitive(a, i, v);
  }

  public static void storeF(float[] a, int i, float v) {
    if (mayF() && active && maybePersistentPrimitives(a, FLOATS)) {
      hooks.storePrimitive(a, i, Float.floatToRawIntBits(v) & 0xffffffffL);
    }
  }

  public static void storeD(double[] a, int i, double v) {
    if (mayD() && active && maybePersistentPrimitives(a, DOUBLES)) {
      hooks.storePrimitive(a, i, Double.doubleToRawLongBits(v));
    }
  }

  public static void storeL(Object[] a, int i, Object v, Object old) {
    if (active && maybePersistentArray(a)) hooks.storeReference(a, i, v, old);
  }

  /** Replaces System.arraycopy in instrumented code. */
  public static void arraycopy(Object src, int srcPos, Object dst, int dstPos, int length) {
    Object[] old = null;
    if (active
        && dst instanceof Object[] a
        && dstPos >= 0
        && length > 0
        && dstPos <= a.length - length
        && maybePersistentArray(dst)
        && hooks.wantsOldElements(dst)) {
      old = new Object[length];
      System.arraycopy(a, dstPos, old, 0, length);
    }
    System.arraycopy(src, srcPos, dst, dstPos, length);
    if (active && maybePersistentArray(dst)) hooks.copied(dst, dstPos, length, old);
  }

  /**
   * At the entry of an instance method of a retransformed collection class; {@code p} is
   * {@code receiver instanceof Persistent}, tested in that method.
   */
  public static int faseEnter(Object receiver, boolean p) {
    if (!active) return 0;
    // Most collections a program writes are not persistent: no identity hash, no call.
    if (!p && IdentityHashes.peek(receiver) == 0 && !reportUnhashed) return 0;
    return hooks.faseEnter(receiver);
  }

  /** At every exit of such a method, including exceptional ones. */
  public static void faseExit(int token) {
    if (token != 0) hooks.faseExit(token);
  }

  /**
   * After a virtual call of clone() that may reach Object.clone() (e.g. {@code (T) clone()} in
   * a class that does not override it): as {@link #cloned}, unless the call returned the
   * receiver itself (an override returning {@code this} is not a copy).
   */
  public static Object clonedFrom(Object original, Object copy) {
    return copy == original ? copy : cloned(copy);
  }

  /** After an invokespecial of Object.clone() (super.clone()) in instrumented code. */
  public static Object cloned(Object copy) {
    if (copy instanceof Persistent && ((Persistent) copy).$kioku$r() != 0) {
      ((Persistent) copy).$kioku$r(0L);
      if (active) hooks.cloned(copy);
    }
    return copy;
  }
}
