#!/usr/bin/env python3
"""Writes src/main/java/kioku/persist/rt/Atomics.java: the replacements of java.base's Unsafe
write methods (see AtomicWrites). Run it after changing the list; the output is reviewed and
committed as ordinary source."""
import os

T = {
  'Int': ('int', 'I', 'Int', 'Int'),
  'Long': ('long', 'J', 'Long', 'Long'),
  'Reference': ('Object', 'Ljava/lang/Object;', 'Object', 'Reference'),
}
out = []
def emit(s): out.append(s)

for tn, (jt, d, sm, hk) in T.items():
    hook = {'Int': 'atomicInt', 'Long': 'atomicLong', 'Reference': 'atomicReference'}[tn]
    box = {'Int': '', 'Long': '', 'Reference': ''}[tn]
    cas = 'compareAndSwapInt' if tn == 'Int' else 'compareAndSwapLong' if tn == 'Long' else 'compareAndSwapObject'
    getv = 'getIntVolatile' if tn == 'Int' else 'getLongVolatile' if tn == 'Long' else 'getObjectVolatile'
    putv = 'putIntVolatile' if tn == 'Int' else 'putLongVolatile' if tn == 'Long' else 'putObjectVolatile'
    puto = 'putOrderedInt' if tn == 'Int' else 'putOrderedLong' if tn == 'Long' else 'putOrderedObject'
    putp = 'putInt' if tn == 'Int' else 'putLong' if tn == 'Long' else 'putObject'
    eq = (lambda a, b: f'{a} == {b}')
    # compareAndSet family
    for suffix in ['', 'Plain', 'Acquire', 'Release']:
        names = [f'weakCompareAndSet{tn}{suffix}']
        if suffix == '':
            names.insert(0, f'compareAndSet{tn}')
        for name in names:
            emit(f'''
  public static boolean {name}(Object u, Object o, long offset, {jt} expected, {jt} x) {{
    if (Barrier.active && Barrier.persistentTarget(o)) {{
      return Barrier.hooks.{hook}(o, offset, Hooks.CAE, expected, x) == expected;
    }}
    boolean done = U.{cas}(o, offset, expected, x);
    Barrier.atomicWrote(o, offset);
    return done;
  }}''')
    for suffix in ['', 'Acquire', 'Release']:
        name = f'compareAndExchange{tn}{suffix}'
        emit(f'''
  public static {jt} {name}(Object u, Object o, long offset, {jt} expected, {jt} x) {{
    if (Barrier.active && Barrier.persistentTarget(o)) {{
      return Barrier.hooks.{hook}(o, offset, Hooks.CAE, expected, x);
    }}
    {jt} witness;
    while (true) {{
      witness = U.{getv}(o, offset);
      if (witness != expected) break;
      if (U.{cas}(o, offset, expected, x)) break;
    }}
    Barrier.atomicWrote(o, offset);
    return witness;
  }}''')
    for suffix in ['', 'Acquire', 'Release']:
        name = f'getAndSet{tn}{suffix}'
        gas = 'getAndSetInt' if tn == 'Int' else 'getAndSetLong' if tn == 'Long' else 'getAndSetObject'
        emit(f'''
  public static {jt} {name}(Object u, Object o, long offset, {jt} x) {{
    if (Barrier.active && Barrier.persistentTarget(o)) {{
      return Barrier.hooks.{hook}(o, offset, Hooks.GET_AND_SET, {"0" if tn != "Reference" else "null"}, x);
    }}
    {jt} previous = U.{gas}(o, offset, x);
    Barrier.atomicWrote(o, offset);
    return previous;
  }}''')
        if tn != 'Reference':
            name = f'getAndAdd{tn}{suffix}'
            gaa = 'getAndAddInt' if tn == 'Int' else 'getAndAddLong'
            emit(f'''
  public static {jt} {name}(Object u, Object o, long offset, {jt} delta) {{
    if (Barrier.active && Barrier.persistentTarget(o)) {{
      return Barrier.hooks.{hook}(o, offset, Hooks.GET_AND_ADD, 0, delta);
    }}
    {jt} previous = U.{gaa}(o, offset, delta);
    Barrier.atomicWrote(o, offset);
    return previous;
  }}''')
    for suffix, op in [('', putp), ('Volatile', putv), ('Release', puto), ('Opaque', putv)]:
        name = f'put{tn}{suffix}'
        emit(f'''
  public static void {name}(Object u, Object o, long offset, {jt} x) {{
    if (Barrier.active && Barrier.persistentTarget(o)) {{
      Barrier.hooks.{hook}(o, offset, Hooks.PUT, {"0" if tn != "Reference" else "null"}, x);
      return;
    }}
    U.{op}(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }}''')

for tn, jt in [('Boolean', 'boolean'), ('Byte', 'byte'), ('Short', 'short'), ('Char', 'char'),
               ('Float', 'float'), ('Double', 'double')]:
    for suffix, op in [('', f'put{tn}'), ('Volatile', f'put{tn}Volatile'), ('Release', f'put{tn}Volatile'),
                       ('Opaque', f'put{tn}Volatile')]:
        emit(f'''
  public static void put{tn}{suffix}(Object u, Object o, long offset, {jt} x) {{
    U.{op}(o, offset, x);
    Barrier.atomicWrote(o, offset);
  }}''')

head = '''package kioku.persist.rt;

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
'''
tail = '''
  // Written by java/persist/tools/gen_atomics.py: the Unsafe write methods of the supported
  // JDK classes. For Int, Long and Reference, compareAndSet and
  // weakCompareAndSet{,Plain,Acquire,Release}, compareAndExchange{,Acquire,Release},
  // getAndSet{,Acquire,Release}, getAndAdd{,Acquire,Release} and put{,Volatile,Release,Opaque};
  // for the other primitive types, put{,Volatile,Release,Opaque} (plain stores, reported after
  // they happen as a putfield is).
}
'''
src = head + '\n'.join(out) + '\n' + tail
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src', 'main', 'java', 'kioku', 'persist', 'rt', 'Atomics.java'), 'w').write(src)
names = sorted(set(l.split('(')[0].split()[-1] for l in out for l in l.split('\n') if l.strip().startswith('public static')))

