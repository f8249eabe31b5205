package kioku.persist.heap;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Constructor;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Hash tables whose keys hash differently in this JVM than in the one that wrote the heap.
 *
 * <p>A hash table keeps each key where its hash code sent it. Enum constants and objects that
 * do not override hashCode hash by identity, which changes at every start (so do records and
 * classes whose hashCode uses such a field): recovered as they were, a HashMap with enum keys
 * would no longer find them. Recovery therefore asks every recovered HashMap (and HashSet,
 * LinkedHashMap..., which hold one) and every Set.of/Map.of table whether it still finds each
 * of its keys; one that does not is rebuilt in place, in one failure-atomic section (a crash
 * in the middle leaves the old tables, which the next start rebuilds again):
 *
 * <ul>
 *   <li>a HashMap or LinkedHashMap (or a subclass) is emptied and refilled with HashMap's own
 *       internal put, in its iteration order, without calling methods a subclass overrides;
 *   <li>a Set.of or Map.of table (ImmutableCollections.SetN, MapN) gets the table a new one of
 *       the same elements builds.
 * </ul>
 */
final class Rehash {
  private Rehash() {}

  /** The objects among {@code objects} whose tables must be rebuilt. */
  /**
   * Whether objects of this class may be tables {@link #needing} or {@link ConcurrentMaps}
   * would rebuild (recovery lists only these).
   */
  static boolean mayNeed(Class<?> c) {
    return HashMap.class.isAssignableFrom(c)
        || java.util.concurrent.ConcurrentHashMap.class.isAssignableFrom(c)
        || IMMUTABLE_TABLES.contains(c.getName());
  }

  static List<Object> needing(Object[] objects) {
    List<Object> out = new ArrayList<>();
    for (Object o : objects) {
      if (o instanceof HashMap<?, ?> m) {
        if (!findsEveryKey(m)) out.add(o);
      } else if (o != null && IMMUTABLE_TABLES.contains(o.getClass().getName())) {
        if (!findsEveryKey(o)) out.add(o);
      }
    }
    return out;
  }

  private static final Set<String> IMMUTABLE_TABLES =
      Set.of("java.util.ImmutableCollections$SetN", "java.util.ImmutableCollections$MapN");

  private static boolean findsEveryKey(HashMap<?, ?> m) {
    for (Object k : m.keySet()) if (!m.containsKey(k)) return false;
    return true;
  }

  private static boolean findsEveryKey(Object table) {
    if (table instanceof Set<?> s) {
      for (Object e : s) if (!s.contains(e)) return false;
    } else if (table instanceof Map<?, ?> m) {
      for (Object k : m.keySet()) if (!m.containsKey(k)) return false;
    }
    return true;
  }

  /**
   * Rebuilds each table in place. The caller has a failure-atomic section open; the heap's
   * barrier is on, so HashMap's instrumented code updates the replicas, and {@code replace}
   * stores a final field of an immutable table with its replica.
   */
  static void rebuild(List<Object> tables, FieldStore replace) throws HeapException {
    for (Object t : tables) {
      try {
        if (t instanceof HashMap<?, ?> m) {
          refill(m);
        } else if (t.getClass().getName().equals("java.util.ImmutableCollections$SetN")) {
          Object fresh = Internals.get().setN.newInstance((Object) ((Set<?>) t).toArray());
          replace.store(t, "elements", Internals.read(fresh, "elements"));
        } else {
          Map<?, ?> m = (Map<?, ?>) t;
          Object[] kv = new Object[2 * m.size()];
          int i = 0;
          for (Map.Entry<?, ?> e : m.entrySet()) {
            kv[i++] = e.getKey();
            kv[i++] = e.getValue();
          }
          Object fresh = Internals.get().mapN.newInstance((Object) kv);
          replace.store(t, "table", Internals.read(fresh, "table"));
        }
      } catch (ReflectiveOperationException e) {
        throw new HeapException(
            HeapException.Reason.INCOMPATIBLE_CLASS,
            "cannot rebuild the hash table of a recovered " + t.getClass().getName() + " (" + e
                + "): run with -javaagent:kioku-persist.jar on a JDK it supports");
      }
    }
  }

  /**
   * Stores into a named field of a persistent object whose own code does not store it there
   * (a final field, or a write recovery makes), with its replica, in the caller's section.
   */
  interface FieldStore {
    void store(Object target, String field, Object value) throws HeapException;

    void storeBits(Object target, String field, long bits) throws HeapException;
  }

  @SuppressWarnings("unchecked")
  private static void refill(HashMap<?, ?> map) throws ReflectiveOperationException {
    Internals in = Internals.get();
    List<Object[]> entries = new ArrayList<>(map.size());
    for (Map.Entry<?, ?> e : map.entrySet()) entries.add(new Object[] {e.getKey(), e.getValue()});
    try {
      if (map instanceof LinkedHashMap) {
        in.linkedClear.invoke((LinkedHashMap<Object, Object>) map);
      } else {
        in.hashClear.invoke((HashMap<Object, Object>) map);
      }
      for (Object[] kv : entries) {
        int hash = (int) in.hash.invoke(kv[0]);
        Object unused = in.putVal.invoke((HashMap<Object, Object>) map, hash, kv[0], kv[1], false, false);
      }
    } catch (RuntimeException | Error e) {
      throw e;
    } catch (Throwable t) {
      throw new ReflectiveOperationException(t);
    }
  }

  /** java.util's internals the rebuild uses, found once (java.util is opened to kioku). */
  private static final class Internals {
    final MethodHandle hashClear;
    final MethodHandle linkedClear;
    final MethodHandle hash;
    final MethodHandle putVal;
    final Constructor<?> setN;
    final Constructor<?> mapN;

    private static Internals instance;

    static synchronized Internals get() throws ReflectiveOperationException {
      if (instance == null) instance = new Internals();
      return instance;
    }

    private Internals() throws ReflectiveOperationException {
      MethodHandles.Lookup hm = MethodHandles.privateLookupIn(HashMap.class, MethodHandles.lookup());
      MethodHandles.Lookup lhm = MethodHandles.privateLookupIn(LinkedHashMap.class, MethodHandles.lookup());
      hashClear = hm.findSpecial(HashMap.class, "clear", MethodType.methodType(void.class), HashMap.class);
      linkedClear =
          lhm.findSpecial(LinkedHashMap.class, "clear", MethodType.methodType(void.class), LinkedHashMap.class);
      hash = hm.findStatic(HashMap.class, "hash", MethodType.methodType(int.class, Object.class));
      putVal = hm.findVirtual(HashMap.class, "putVal",
          MethodType.methodType(Object.class, int.class, Object.class, Object.class, boolean.class, boolean.class));
      setN = Class.forName("java.util.ImmutableCollections$SetN").getDeclaredConstructor(Object[].class);
      setN.setAccessible(true);
      mapN = Class.forName("java.util.ImmutableCollections$MapN").getDeclaredConstructor(Object[].class);
      mapN.setAccessible(true);
    }

    static Object read(Object o, String field) throws ReflectiveOperationException {
      Field f = o.getClass().getDeclaredField(field);
      return Unsafes.U.getObject(o, Unsafes.fieldOffset(f));
    }
  }
}
