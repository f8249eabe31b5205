package kioku.persist.heap;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What a crash can leave in a ConcurrentHashMap, tidied at recovery.
 *
 * <p>Its operations publish each change with one atomic write, so a crash leaves a map whose
 * every entry is there and findable, but possibly: a resize half done (bins replaced by
 * forwarding nodes to the new table), a bin reserved by a computeIfAbsent that never stored
 * its value, a count that missed the last insertion or removal, or keys that hash differently
 * in this JVM (enum keys, see Rehash). The resize's own state (sizeCtl, nextTable,
 * transferIndex) and the spin locks are not replicated (Layout), since they only mean
 * something to threads that died. Recovery then:
 *
 * <ul>
 *   <li>rebuilds a map in any of those states: emptied and refilled with its own internal
 *       put, in one failure-atomic section, so it ends as a map built by puts of its entries;
 *   <li>gives every other map the resize threshold its table implies (three quarters of it),
 *       which ConcurrentHashMap keeps only in memory.
 * </ul>
 */
final class ConcurrentMaps {
  private ConcurrentMaps() {}

  /** The maps among {@code objects} to rebuild; the others get their threshold now. */
  static List<Object> needing(Object[] objects) throws HeapException {
    List<Object> out = new ArrayList<>();
    for (Object o : objects) {
      if (!(o instanceof ConcurrentHashMap<?, ?> m)) continue;
      try {
        if (needsRebuild(m)) {
          out.add(o);
        } else {
          Object[] table = (Object[]) Internals.get().table.get(m);
          int n = table == null ? 0 : table.length;
          Internals.get().sizeCtl.setInt(m, n - (n >>> 2));
        }
      } catch (ReflectiveOperationException e) {
        throw unsupported(o, e);
      }
    }
    return out;
  }

  private static boolean needsRebuild(ConcurrentHashMap<?, ?> m) throws ReflectiveOperationException {
    Internals in = Internals.get();
    Object[] table = (Object[]) in.table.get(m);
    if (table != null) {
      for (Object bin : table) {
        if (bin != null && (in.forwarding.isInstance(bin) || in.reservation.isInstance(bin))) return true;
      }
    }
    long[] entries = {0};
    boolean[] lost = {false};
    m.forEach((k, v) -> {
      entries[0]++;
      if (!m.containsKey(k)) lost[0] = true;
    });
    return lost[0] || m.mappingCount() != entries[0];
  }

  /**
   * Rebuilds each map: its entries read, its table, count and counter cells cleared (through
   * {@code store}, which writes the replica in the caller's section), then every entry put
   * again with ConcurrentHashMap's instrumented internal put.
   */
  static void rebuild(List<Object> maps, Rehash.FieldStore store) throws HeapException {
    for (Object o : maps) {
      ConcurrentHashMap<?, ?> m = (ConcurrentHashMap<?, ?>) o;
      try {
        Internals in = Internals.get();
        List<Object[]> entries = new ArrayList<>();
        m.forEach((k, v) -> entries.add(new Object[] {k, v}));
        store.store(m, "table", null);
        store.store(m, "counterCells", null);
        store.storeBits(m, "baseCount", 0);
        in.sizeCtl.setInt(m, 0);
        for (Object[] kv : entries) {
          Object unused = in.putVal.invoke(m, kv[0], kv[1], false);
        }
      } catch (RuntimeException | Error e) {
        throw e;
      } catch (Throwable t) {
        throw unsupported(o, t);
      }
    }
  }

  private static HeapException unsupported(Object o, Throwable e) {
    return new HeapException(
        HeapException.Reason.INCOMPATIBLE_CLASS,
        "cannot tidy a recovered " + o.getClass().getName() + " (" + e
            + "): run with -javaagent:kioku-persist.jar on a JDK it supports");
  }

  /** ConcurrentHashMap's internals, found once (java.util.concurrent is opened to kioku). */
  private static final class Internals {
    final Field table;
    final Field sizeCtl;
    final Class<?> forwarding;
    final Class<?> reservation;
    final MethodHandle putVal;

    private static Internals instance;

    static synchronized Internals get() throws ReflectiveOperationException {
      if (instance == null) instance = new Internals();
      return instance;
    }

    private Internals() throws ReflectiveOperationException {
      table = ConcurrentHashMap.class.getDeclaredField("table");
      table.setAccessible(true);
      sizeCtl = ConcurrentHashMap.class.getDeclaredField("sizeCtl");
      sizeCtl.setAccessible(true);
      forwarding = Class.forName("java.util.concurrent.ConcurrentHashMap$ForwardingNode");
      reservation = Class.forName("java.util.concurrent.ConcurrentHashMap$ReservationNode");
      MethodHandles.Lookup l = MethodHandles.privateLookupIn(ConcurrentHashMap.class, MethodHandles.lookup());
      putVal = l.findVirtual(ConcurrentHashMap.class, "putVal",
          MethodType.methodType(Object.class, Object.class, Object.class, boolean.class));
    }
  }
}
