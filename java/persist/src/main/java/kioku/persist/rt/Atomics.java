package kioku.persist.rt;

import java.lang.invoke.VarHandle;
import java.lang.reflect.Field;
import sun.misc.Unsafe;

/**
 * The atomic writes of java.util.concurrent and java.util.concurrent.atomic: the instrumentation
 * replaces each call of {@code jdk.internal.misc.Unsafe.NAME(o, offset, ...)} in a supported JDK
 * class by a call of {@code Atomics.NAME(unsafe, o, offset, ...)} (the same stack: the Unsafe
 * instance becomes the first argument, unused), and follows each VarHandle write of a field or
 * an array element with {@link #varHandleWroteField} or {@link #varHandleWroteElement}.
 *
 * <p>Unsafe writes into a persistent object are durable before they are visible (NVM-first, as
 * volatile putfields): the runtime locks the object, computes what the operation will leave,
 * writes the replica, then performs the operation (see Hooks#atomicInt). Writes into any other
 * object run at once, then check whether the object turned persistent meanwhile (its copier
 * may have read the old value), as every barrier does. The weak, acquire, release and opaque
 * forms are performed as their strong (volatile) forms, which are allowed implementations of
 * them; a compare-and-exchange is a read and a compare-and-set, retried, which is linearizable.
 * This class is written by java/persist/tools/gen_atomics.py.
 */
public final class Atomics {
  private Atomics() {}

  private static final Unsafe U = unsafe();

  private static Unsafe unsafe() {
    try {
      Field f = Unsafe.class.getDeclaredField("theUnsafe");
      f.setAccessible(true);
      return (Unsafe) f.get(null);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /** Performs an atomic write of an int (see Hooks#atomicInt), with nothing else. */
  public static int performInt(Object o, long offset, int op, int expected, int value) {
    return switch (op) {
      case Hooks.CAE -> {
        while (true) {
          int witness = U.getIntVolatile(o, offset);
          if (witness != expected || U.compareAndSwapInt(o, offset, expected, value)) yield witness;
        }
      }
      case Hooks.GET_AND_SET -> U.getAndSetInt(o, offset, value);
      case Hooks.GET_AND_ADD -> U.getAndAddInt(o, offset, value);
      case Hooks.PUT -> {
        U.putIntVolatile(o, offset, value);
        yield 0;
      }
      default -> throw new IllegalArgumentException("atomic operation " + op);
    };
  }

  public static long performLong(Object o, long offset, int op, long expected, long value) {
    return switch (op) {
      case Hooks.CAE -> {
        while (true) {
          long witness = U.getLongVolatile(o, offset);
          if (witness != expected || U.compareAndSwapLong(o, offset, expected, value)) yield witness;
        }
      }
      case Hooks.GET_AND_SET -> U.getAndSetLong(o, offset, value);
      case Hooks.GET_AND_ADD -> U.getAndAddLong(o, offset, value);
      case Hooks.PUT -> {
        U.putLongVolatile(o, offset, value);
        yield 0L;
      }
      default -> throw new IllegalArgumentException("atomic operation " + op);
    };
  }

  public static Object performReference(Object o, long offset, int op, Object expected, Object value) {
    return switch (op) {
      case Hooks.CAE -> {
        while (true) {
          Object witness = U.getObjectVolatile(o, offset);
          if (witness != expected || U.compareAndSwapObject(o, offset, expected, value)) yield witness;
        }
      }
      case Hooks.GET_AND_SET -> U.getAndSetObject(o, offset, value);
      case Hooks.PUT -> {
        U.putObjectVolatile(o, offset, value);
        yield null;
      }
      default -> throw new IllegalArgumentException("atomic operation " + op);
    };
  }

  /** After a VarHandle write of a field of {@code o} (a field handle: one coordinate). */
  public static void varHandleWroteField(VarHandle vh, Object o) {
    if (Barrier.active && Barrier.maybePersistent(o)) Barrier.hooks.varHandleWrote(vh, o, -1);
  }

  /** After a VarHandle write of element {@code index} of {@code array}. */
  public static void varHandleWroteElement(VarHandle vh, Object array, int index) {
    if (Barrier.active && Barrier.maybePersistent(array)) {
      Barrier.hooks.varHandleWrote(vh, array, index);
    }
  }

  public static boolean compareAndSetInt(Object u, Object o, long offset, int expected, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapInt(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetInt(Object u, Object o, long offset, int expected, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapInt(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetIntPlain(Object u, Object o, long offset, int expected, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapInt(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetIntAcquire(Object u, Object o, long offset, int expected, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapInt(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetIntRelease(Object u, Object o, long offset, int expected, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapInt(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static int compareAndExchangeInt(Object u, Object o, long offset, int expected, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.CAE, expected, x);
    }
    int witness;
    while (true) {
      witness = U.getIntVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapInt(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static int compareAndExchangeIntAcquire(Object u, Object o, long offset, int expected, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.CAE, expected, x);
    }
    int witness;
    while (true) {
      witness = U.getIntVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapInt(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static int compareAndExchangeIntRelease(Object u, Object o, long offset, int expected, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.CAE, expected, x);
    }
    int witness;
    while (true) {
      witness = U.getIntVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapInt(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static int getAndSetInt(Object u, Object o, long offset, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.GET_AND_SET, 0, x);
    }
    int previous = U.getAndSetInt(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static int getAndAddInt(Object u, Object o, long offset, int delta) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.GET_AND_ADD, 0, delta);
    }
    int previous = U.getAndAddInt(o, offset, delta);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static int getAndSetIntAcquire(Object u, Object o, long offset, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.GET_AND_SET, 0, x);
    }
    int previous = U.getAndSetInt(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static int getAndAddIntAcquire(Object u, Object o, long offset, int delta) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.GET_AND_ADD, 0, delta);
    }
    int previous = U.getAndAddInt(o, offset, delta);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static int getAndSetIntRelease(Object u, Object o, long offset, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.GET_AND_SET, 0, x);
    }
    int previous = U.getAndSetInt(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static int getAndAddIntRelease(Object u, Object o, long offset, int delta) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicInt(o, offset, Hooks.GET_AND_ADD, 0, delta);
    }
    int previous = U.getAndAddInt(o, offset, delta);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static void putInt(Object u, Object o, long offset, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicInt(o, offset, Hooks.PUT, 0, x);
      return;
    }
    U.putInt(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putIntVolatile(Object u, Object o, long offset, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicInt(o, offset, Hooks.PUT, 0, x);
      return;
    }
    U.putIntVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putIntRelease(Object u, Object o, long offset, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicInt(o, offset, Hooks.PUT, 0, x);
      return;
    }
    U.putOrderedInt(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putIntOpaque(Object u, Object o, long offset, int x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicInt(o, offset, Hooks.PUT, 0, x);
      return;
    }
    U.putIntVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static boolean compareAndSetLong(Object u, Object o, long offset, long expected, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapLong(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetLong(Object u, Object o, long offset, long expected, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapLong(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetLongPlain(Object u, Object o, long offset, long expected, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapLong(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetLongAcquire(Object u, Object o, long offset, long expected, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapLong(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetLongRelease(Object u, Object o, long offset, long expected, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapLong(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static long compareAndExchangeLong(Object u, Object o, long offset, long expected, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.CAE, expected, x);
    }
    long witness;
    while (true) {
      witness = U.getLongVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapLong(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static long compareAndExchangeLongAcquire(Object u, Object o, long offset, long expected, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.CAE, expected, x);
    }
    long witness;
    while (true) {
      witness = U.getLongVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapLong(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static long compareAndExchangeLongRelease(Object u, Object o, long offset, long expected, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.CAE, expected, x);
    }
    long witness;
    while (true) {
      witness = U.getLongVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapLong(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static long getAndSetLong(Object u, Object o, long offset, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.GET_AND_SET, 0, x);
    }
    long previous = U.getAndSetLong(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static long getAndAddLong(Object u, Object o, long offset, long delta) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.GET_AND_ADD, 0, delta);
    }
    long previous = U.getAndAddLong(o, offset, delta);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static long getAndSetLongAcquire(Object u, Object o, long offset, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.GET_AND_SET, 0, x);
    }
    long previous = U.getAndSetLong(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static long getAndAddLongAcquire(Object u, Object o, long offset, long delta) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.GET_AND_ADD, 0, delta);
    }
    long previous = U.getAndAddLong(o, offset, delta);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static long getAndSetLongRelease(Object u, Object o, long offset, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.GET_AND_SET, 0, x);
    }
    long previous = U.getAndSetLong(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static long getAndAddLongRelease(Object u, Object o, long offset, long delta) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicLong(o, offset, Hooks.GET_AND_ADD, 0, delta);
    }
    long previous = U.getAndAddLong(o, offset, delta);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static void putLong(Object u, Object o, long offset, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicLong(o, offset, Hooks.PUT, 0, x);
      return;
    }
    U.putLong(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putLongVolatile(Object u, Object o, long offset, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicLong(o, offset, Hooks.PUT, 0, x);
      return;
    }
    U.putLongVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putLongRelease(Object u, Object o, long offset, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicLong(o, offset, Hooks.PUT, 0, x);
      return;
    }
    U.putOrderedLong(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putLongOpaque(Object u, Object o, long offset, long x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicLong(o, offset, Hooks.PUT, 0, x);
      return;
    }
    U.putLongVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static boolean compareAndSetReference(Object u, Object o, long offset, Object expected, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapObject(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetReference(Object u, Object o, long offset, Object expected, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapObject(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetReferencePlain(Object u, Object o, long offset, Object expected, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapObject(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetReferenceAcquire(Object u, Object o, long offset, Object expected, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapObject(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static boolean weakCompareAndSetReferenceRelease(Object u, Object o, long offset, Object expected, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.CAE, expected, x) == expected;
    }
    boolean done = U.compareAndSwapObject(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }

  public static Object compareAndExchangeReference(Object u, Object o, long offset, Object expected, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.CAE, expected, x);
    }
    Object witness;
    while (true) {
      witness = U.getObjectVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapObject(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static Object compareAndExchangeReferenceAcquire(Object u, Object o, long offset, Object expected, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.CAE, expected, x);
    }
    Object witness;
    while (true) {
      witness = U.getObjectVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapObject(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static Object compareAndExchangeReferenceRelease(Object u, Object o, long offset, Object expected, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.CAE, expected, x);
    }
    Object witness;
    while (true) {
      witness = U.getObjectVolatile(o, offset);
      if (witness != expected) break;
      if (U.compareAndSwapObject(o, offset, expected, x)) break;
    }
    Barrier.atomicWrote(o, offset);
    return witness;
  }

  public static Object getAndSetReference(Object u, Object o, long offset, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.GET_AND_SET, null, x);
    }
    Object previous = U.getAndSetObject(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static Object getAndSetReferenceAcquire(Object u, Object o, long offset, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.GET_AND_SET, null, x);
    }
    Object previous = U.getAndSetObject(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static Object getAndSetReferenceRelease(Object u, Object o, long offset, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      return Barrier.hooks.atomicReference(o, offset, Hooks.GET_AND_SET, null, x);
    }
    Object previous = U.getAndSetObject(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }

  public static void putReference(Object u, Object o, long offset, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicReference(o, offset, Hooks.PUT, null, x);
      return;
    }
    U.putObject(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putReferenceVolatile(Object u, Object o, long offset, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicReference(o, offset, Hooks.PUT, null, x);
      return;
    }
    U.putObjectVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putReferenceRelease(Object u, Object o, long offset, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicReference(o, offset, Hooks.PUT, null, x);
      return;
    }
    U.putOrderedObject(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putReferenceOpaque(Object u, Object o, long offset, Object x) {
    if (Barrier.active && Barrier.persistentTarget(o)) {
      Barrier.hooks.atomicReference(o, offset, Hooks.PUT, null, x);
      return;
    }
    U.putObjectVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putBoolean(Object u, Object o, long offset, boolean x) {
    U.putBoolean(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putBooleanVolatile(Object u, Object o, long offset, boolean x) {
    U.putBooleanVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putBooleanRelease(Object u, Object o, long offset, boolean x) {
    U.putBooleanVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putBooleanOpaque(Object u, Object o, long offset, boolean x) {
    U.putBooleanVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putByte(Object u, Object o, long offset, byte x) {
    U.putByte(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putByteVolatile(Object u, Object o, long offset, byte x) {
    U.putByteVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putByteRelease(Object u, Object o, long offset, byte x) {
    U.putByteVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putByteOpaque(Object u, Object o, long offset, byte x) {
    U.putByteVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putShort(Object u, Object o, long offset, short x) {
    U.putShort(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putShortVolatile(Object u, Object o, long offset, short x) {
    U.putShortVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putShortRelease(Object u, Object o, long offset, short x) {
    U.putShortVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putShortOpaque(Object u, Object o, long offset, short x) {
    U.putShortVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putChar(Object u, Object o, long offset, char x) {
    U.putChar(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putCharVolatile(Object u, Object o, long offset, char x) {
    U.putCharVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putCharRelease(Object u, Object o, long offset, char x) {
    U.putCharVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putCharOpaque(Object u, Object o, long offset, char x) {
    U.putCharVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putFloat(Object u, Object o, long offset, float x) {
    U.putFloat(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putFloatVolatile(Object u, Object o, long offset, float x) {
    U.putFloatVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putFloatRelease(Object u, Object o, long offset, float x) {
    U.putFloatVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putFloatOpaque(Object u, Object o, long offset, float x) {
    U.putFloatVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putDouble(Object u, Object o, long offset, double x) {
    U.putDouble(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putDoubleVolatile(Object u, Object o, long offset, double x) {
    U.putDoubleVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putDoubleRelease(Object u, Object o, long offset, double x) {
    U.putDoubleVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  public static void putDoubleOpaque(Object u, Object o, long offset, double x) {
    U.putDoubleVolatile(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }

  // Written by java/persist/tools/gen_atomics.py: the Unsafe write methods of the supported
  // JDK classes. For Int, Long and Reference, compareAndSet and
  // weakCompareAndSet{,Plain,Acquire,Release}, compareAndExchange{,Acquire,Release},
  // getAndSet{,Acquire,Release}, getAndAdd{,Acquire,Release} and put{,Volatile,Release,Opaque};
  // for the other primitive types, put{,Volatile,Release,Opaque} (plain stores, reported after
  // they happen as a putfield is).
}
