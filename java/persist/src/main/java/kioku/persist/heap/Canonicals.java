package kioku.persist.heap;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Set;

/**
 * The JDK's shared instances, which a program may compare with {@code ==}: Boolean.TRUE and
 * FALSE, the cached boxes of Byte, Short, Integer, Long and Character, and singletons held in
 * static fields such as Collections.EMPTY_LIST, List.of(), Optional.empty() or BigDecimal.ZERO.
 * A replica of one records which it is, and recovery hands back that same instance of the
 * running JVM (enum constants are recovered by name the same way, see Layout.Kind.ENUM).
 * Classes (an EnumMap's key type) and java.time's region zones are named the same way and come
 * back through the running JVM: Class.forName, ZoneId.of.
 *
 * <p>Names: {@code box:java.lang.Integer} (the value is the replica's one body word), {@code
 * static:java.util.Collections#EMPTY_LIST} or {@code static:java.math.BigDecimal#ZERO_THROUGH_TEN[3]}
 * (an element of a static array), {@code class:java.time.DayOfWeek}, {@code zone:Europe/Paris}.
 * More singletons are added to {@link #STATICS}.
 */
final class Canonicals {
  private Canonicals() {}

  static final String BOX = "box:";
  static final String STATIC = "static:";
  static final String CLASS = "class:";
  static final String ZONE = "zone:";

  /**
   * Static final fields whose values are shared singletons, "binary.Class#field"; a field
   * holding an array of them, "binary.Class#field[]" (each element is one).
   */
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
    "java.util.ImmutableCollections#EMPTY",
    "java.util.ImmutableCollections#EMPTY_LIST",
    "java.util.ImmutableCollections#EMPTY_LIST_NULLS",
    "java.util.ImmutableCollections#EMPTY_SET",
    "java.util.ImmutableCollections#EMPTY_MAP",
    "java.util.Optional#EMPTY",
    "java.util.OptionalInt#EMPTY",
    "java.util.OptionalLong#EMPTY",
    "java.util.OptionalDouble#EMPTY",
    "java.util.EnumMap#NULL",
    "java.math.BigDecimal#ZERO_THROUGH_TEN[]",
    "java.math.BigDecimal#ZERO_SCALED_BY[]",
    "java.math.BigInteger#ZERO",
    "java.math.BigInteger#posConst[]",
    "java.math.BigInteger#negConst[]",
    "java.math.MathContext#UNLIMITED",
    "java.math.MathContext#DECIMAL32",
    "java.math.MathContext#DECIMAL64",
    "java.math.MathContext#DECIMAL128",
    "java.time.ZoneOffset#UTC",
    "java.time.LocalTime#MIDNIGHT",
    "java.time.Duration#ZERO",
    "java.time.Period#ZERO",
    "java.time.Instant#EPOCH",
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
        if (s.endsWith("[]")) {
          String field = s.substring(0, s.length() - 2);
          if (!(read(field) instanceof Object[] a)) continue;
          for (int i = 0; i < a.length; i++) {
            // The first name wins: BigDecimal.ZERO is also ZERO_THROUGH_TEN[0].
            if (a[i] != null && !byInstance.containsKey(a[i])) {
              byInstance.put(a[i], STATIC + field + "[" + i + "]");
              cs.add(a[i].getClass());
            }
          }
        } else {
          Object v = read(s);
          if (v != null && !byInstance.containsKey(v)) {
            byInstance.put(v, STATIC + s);
            cs.add(v.getClass());
          }
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

  /**
   * The value of a static field named "binary.Class#field", or of one element of it,
   * "binary.Class#field[i]" (null if it does not exist).
   */
  private static Object read(String spec) {
    int hash = spec.indexOf('#');
    String field = spec.substring(hash + 1);
    int index = -1;
    if (field.endsWith("]")) {
      int open = field.indexOf('[');
      try {
        index = Integer.parseInt(field.substring(open + 1, field.length() - 1));
      } catch (NumberFormatException e) {
        return null;
      }
      field = field.substring(0, open);
    }
    try {
      Class<?> c = Class.forName(spec.substring(0, hash), true, null);
      Field f = c.getDeclaredField(field);
      if (!Modifier.isStatic(f.getModifiers())) return null;
      Object v = Unsafes.U.getObject(Unsafes.U.staticFieldBase(f), Unsafes.U.staticFieldOffset(f));
      if (index < 0) return v;
      return v instanceof Object[] a && index < a.length ? a[index] : null;
    } catch (ReflectiveOperationException | LinkageError e) {
      return null;
    }
  }

  /** The canonical name of {@code v}, or null if it is an ordinary object. */
  static String nameOf(Object v) {
    Class<?> c = v.getClass();
    if (BOXES.contains(c)) return isCachedBox(v) ? BOX + c.getName() : null;
    if (c == Class.class) {
      Class<?> k = (Class<?>) v;
      return k.isHidden() ? null : CLASS + k.getName();
    }
    if (c.getName().equals("java.time.ZoneRegion")) return ZONE + ((java.time.ZoneId) v).getId();
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

  /**
   * The running JVM's instance for a name and body word, or null if it has none. Classes are
   * loaded through {@code loader} (null: boot loader only).
   */
  static Object resolve(String name, long value, java.util.function.Function<String, Class<?>> loader) {
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
    if (name.startsWith(CLASS)) {
      String n = name.substring(CLASS.length());
      Class<?> p = PRIMITIVES.get(n);
      if (p != null) return p;
      return loader == null ? null : loader.apply(n);
    }
    if (name.startsWith(ZONE)) {
      try {
        return java.time.ZoneId.of(name.substring(ZONE.length()));
      } catch (java.time.DateTimeException e) {
        return null;
      }
    }
    return null;
  }

  private static final Map<String, Class<?>> PRIMITIVES =
      Map.of("boolean", boolean.class, "byte", byte.class, "char", char.class, "short", short.class,
          "int", int.class, "long", long.class, "float", float.class, "double", double.class,
          "void", void.class);
}
