package kioku.persist.heap;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Set;

/**
 * The JDK's shared instances, which a program may compare with {@code ==}: Boolean.TRUE and
 * FALSE, the cached boxes of Byte, Short, Integer, Long and Character, and singletons held in
 * static fields such as Collections.EMPTY_LIST or String.CASE_INSENSITIVE_ORDER. A replica of
 * one records which it is, and recovery hands back that same instance of the running JVM
 * (enum constants are recovered by name the same way, see Layout.Kind.ENUM).
 *
 * <p>Names: {@code box:java.lang.Integer} (the value is the replica's one body word) or {@code
 * static:java.util.Collections#EMPTY_LIST}. More singletons are added to {@link #STATICS}.
 */
final class Canonicals {
  private Canonicals() {}

  static final String BOX = "box:";
  static final String STATIC = "static:";

  /** Static final fields whose values are shared singletons, "binary.Class#field". */
  private static final String[] STATICS = {
    "java.util.Collections#EMPTY_LIST",
    "java.util.Collections#EMPTY_SET",
    "java.util.Collections#EMPTY_MAP",
    "java.util.Collections$EmptyIterator#EMPTY_ITERATOR",
    "java.util.Collections$EmptyListIterator#EMPTY_ITERATOR",
    "java.util.Collections$EmptyEnumeration#EMPTY_ENUMERATION",
    "java.util.Collections$UnmodifiableNavigableSet#EMPTY_NAVIGABLE_SET",
    "java.util.Collections$UnmodifiableNavigableMap#EMPTY_NAVIGABLE_MAP",
    "java.util.Collections$ReverseComparator#REVERSE_ORDER",
    "java.lang.String#CASE_INSENSITIVE_ORDER",
  };

  private static final Set<Class<?>> BOXES =
      Set.of(Boolean.class, Byte.class, Short.class, Integer.class, Long.class, Character.class);

  /** Instance → name, and the classes of those instances (for a cheap first test). */
  private static final class Singletons {
    final Map<Object, String> byInstance = new IdentityHashMap<>();
    final Set<Class<?>> classes;

    Singletons() {
      java.util.HashSet<Class<?>> cs = new java.util.HashSet<>();
      for (String s : STATICS) {
        Object v = read(s);
        if (v != null) {
          byInstance.put(v, STATIC + s);
          cs.add(v.getClass());
        }
      }
      classes = Set.copyOf(cs);
    }
  }

  private static volatile Singletons singletons;

  private static Singletons singletons() {
    Singletons s = singletons;
    if (s == null) singletons = s = new Singletons();
    return s;
  }

  /** The value of a static field named "binary.Class#field" (null if it does not exist). */
  private static Object read(String spec) {
    int hash = spec.indexOf('#');
    try {
      Class<?> c = Class.forName(spec.substring(0, hash), true, null);
      Field f = c.getDeclaredField(spec.substring(hash + 1));
      if (!Modifier.isStatic(f.getModifiers())) return null;
      return Unsafes.U.getObject(Unsafes.U.staticFieldBase(f), Unsafes.U.staticFieldOffset(f));
    } catch (ReflectiveOperationException | LinkageError e) {
      return null;
    }
  }

  /** The canonical name of {@code v}, or null if it is an ordinary object. */
  static String nameOf(Object v) {
    Class<?> c = v.getClass();
    if (BOXES.contains(c)) return isCachedBox(v) ? BOX + c.getName() : null;
    Singletons s = singletons();
    if (!s.classes.contains(c)) return null;
    return s.byInstance.get(v);
  }

  private static boolean isCachedBox(Object v) {
    if (v instanceof Boolean b) return v == Boolean.valueOf(b);
    if (v instanceof Byte b) return v == Byte.valueOf(b);
    if (v instanceof Short x) return v == Short.valueOf(x);
    if (v instanceof Integer i) return v == Integer.valueOf(i);
    if (v instanceof Long l) return v == Long.valueOf(l);
    if (v instanceof Character ch) return v == Character.valueOf(ch);
    return false;
  }

  /** The body word of a canonical box: its value. */
  static long valueBits(Object v) {
    if (v instanceof Boolean b) return b ? 1 : 0;
    if (v instanceof Character ch) return ch;
    return ((Number) v).longValue();
  }

  /** The running JVM's instance for a name and body word, or null if it has none. */
  static Object resolve(String name, long value) {
    if (name.startsWith(BOX)) {
      switch (name.substring(BOX.length())) {
        case "java.lang.Boolean":
          return Boolean.valueOf(value != 0);
        case "java.lang.Byte":
          return Byte.valueOf((byte) value);
        case "java.lang.Short":
          return Short.valueOf((short) value);
        case "java.lang.Integer":
          return Integer.valueOf((int) value);
        case "java.lang.Long":
          return Long.valueOf(value);
        case "java.lang.Character":
          return Character.valueOf((char) value);
        default:
          return null;
      }
    }
    if (name.startsWith(STATIC)) return read(name.substring(STATIC.length()));
    return null;
  }
}
