package kioku.persist.agent;

import java.util.Set;
import org.objectweb.asm.Type;

/**
 * The atomic writes the instrumentation intercepts: calls of java.base's internal Unsafe that
 * write an object's field or an array element (replaced by the same-named method of
 * kioku.persist.rt.Atomics), and VarHandle access modes that write (followed by a report of
 * the written field or element).
 */
final class AtomicWrites {
  private AtomicWrites() {}

  static final String UNSAFE = "jdk/internal/misc/Unsafe";
  static final String VAR_HANDLE = "java/lang/invoke/VarHandle";
  static final String ATOMICS = "kioku/persist/rt/Atomics";

  /** The Unsafe write methods Atomics has (each with the Unsafe as an extra first argument). */
  private static final Set<String> UNSAFE_HELPERS = helpers();

  private static Set<String> helpers() {
    java.util.HashSet<String> s = new java.util.HashSet<>();
    for (String t : new String[] {"Int", "Long", "Reference"}) {
      s.add("compareAndSet" + t);
      for (String x : new String[] {"", "Plain", "Acquire", "Release"}) s.add("weakCompareAndSet" + t + x);
      for (String x : new String[] {"", "Acquire", "Release"}) {
        s.add("compareAndExchange" + t + x);
        s.add("getAndSet" + t + x);
        if (!t.equals("Reference")) s.add("getAndAdd" + t + x);
      }
      for (String x : new String[] {"", "Volatile", "Release", "Opaque"}) s.add("put" + t + x);
    }
    for (String t : new String[] {"Boolean", "Byte", "Short", "Char", "Float", "Double"}) {
      for (String x : new String[] {"", "Volatile", "Release", "Opaque"}) s.add("put" + t + x);
    }
    return Set.copyOf(s);
  }

  private static final String[] WRITE_PREFIXES = {
    "put", "compareAndSet", "compareAndExchange", "weakCompareAndSet", "getAndSet", "getAndAdd",
    "getAndBitwise"
  };

  /** Whether an Unsafe call writes at (object, offset): its first two parameters say so. */
  static boolean isUnsafeObjectWrite(String owner, String name, String desc) {
    if (!owner.equals(UNSAFE) || !desc.startsWith("(Ljava/lang/Object;J")) return false;
    for (String p : WRITE_PREFIXES) if (name.startsWith(p)) return true;
    return false;
  }

  /** Whether Atomics has a replacement for this Unsafe write. */
  static boolean hasUnsafeHelper(String name) {
    return UNSAFE_HELPERS.contains(name);
  }

  /** The descriptor of the Atomics replacement: the Unsafe first, as an Object. */
  static String helperDesc(String unsafeDesc) {
    return "(Ljava/lang/Object;" + unsafeDesc.substring(1);
  }

  private static final Set<String> ONE_VALUE = Set.of(
      "set", "setVolatile", "setRelease", "setOpaque",
      "getAndSet", "getAndSetAcquire", "getAndSetRelease",
      "getAndAdd", "getAndAddAcquire", "getAndAddRelease",
      "getAndBitwiseOr", "getAndBitwiseOrAcquire", "getAndBitwiseOrRelease",
      "getAndBitwiseAnd", "getAndBitwiseAndAcquire", "getAndBitwiseAndRelease",
      "getAndBitwiseXor", "getAndBitwiseXorAcquire", "getAndBitwiseXorRelease");
  private static final Set<String> TWO_VALUES = Set.of(
      "compareAndSet", "compareAndExchange", "compareAndExchangeAcquire",
      "compareAndExchangeRelease", "weakCompareAndSetPlain", "weakCompareAndSet",
      "weakCompareAndSetAcquire", "weakCompareAndSetRelease");

  /** What a VarHandle call writes. */
  enum Target {
    /** Not a write. */
    NONE,
    /** A static field (no coordinate): not an object's state. */
    STATIC,
    /** A field of the first coordinate. */
    FIELD,
    /** Element (second coordinate, an int) of the first coordinate, an array. */
    ELEMENT,
    /** A write of some other shape: the class cannot be made persistent safely. */
    UNKNOWN
  }

  static Target varHandleTarget(String owner, String name, String desc) {
    if (!owner.equals(VAR_HANDLE)) return Target.NONE;
    int values = ONE_VALUE.contains(name) ? 1 : TWO_VALUES.contains(name) ? 2 : -1;
    if (values < 0) return Target.NONE;
    Type[] args = Type.getArgumentTypes(desc);
    int coordinates = args.length - values;
    if (coordinates == 0) return Target.STATIC;
    boolean ref0 = args[0].getSort() == Type.OBJECT || args[0].getSort() == Type.ARRAY;
    if (coordinates == 1 && ref0) return Target.FIELD;
    if (coordinates == 2 && ref0 && args[1].getSort() == Type.INT) return Target.ELEMENT;
    return Target.UNKNOWN;
  }
}
