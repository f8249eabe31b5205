package kioku.persist.heap;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import sun.misc.Unsafe;

/**
 * sun.misc.Unsafe, for what reflection cannot do at the speed the barrier needs: reading any
 * field of an object by offset while copying it to its replica, writing final fields while
 * rebuilding objects at recovery, allocating an instance without running a constructor, and
 * compare-and-set of the replica word. Every use passes an offset obtained from
 * {@link #fieldOffset} of a field of the object's own class, or an array offset within bounds.
 */
final class Unsafes {
  private Unsafes() {}

  static final Unsafe U = load();

  private static Unsafe load() {
    try {
      Field f = Unsafe.class.getDeclaredField("theUnsafe");
      f.setAccessible(true);
      return (Unsafe) f.get(null);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /**
   * The offset of an instance field. sun.misc.Unsafe refuses the fields of records (and hidden
   * classes); for those this asks java.base's internal Unsafe, which the agent exports to
   * kioku (a JVM run without the agent needs {@code --add-exports
   * java.base/jdk.internal.misc=ALL-UNNAMED}).
   */
  static long fieldOffset(Field f) {
    try {
      return U.objectFieldOffset(f);
    } catch (UnsupportedOperationException e) {
      return Internal.offset(f);
    }
  }

  private static final class Internal {
    private static final Object UNSAFE;
    private static final Method OFFSET;
    private static final String WHY_NOT;

    static {
      Object unsafe = null;
      Method offset = null;
      String why = null;
      try {
        Class<?> k = Class.forName("jdk.internal.misc.Unsafe");
        unsafe = k.getMethod("getUnsafe").invoke(null);
        offset = k.getMethod("objectFieldOffset", Field.class);
      } catch (ReflectiveOperationException | RuntimeException e) {
        why = e.toString();
      }
      UNSAFE = unsafe;
      OFFSET = offset;
      WHY_NOT = why;
    }

    static long offset(Field f) {
      if (OFFSET == null) throw unavailable(f, WHY_NOT);
      try {
        return (long) OFFSET.invoke(UNSAFE, f);
      } catch (IllegalAccessException e) {
        throw unavailable(f, e.toString());
      } catch (InvocationTargetException e) {
        throw unavailable(f, e.getCause().toString());
      }
    }

    private static UnsupportedOperationException unavailable(Field f, String why) {
      return new UnsupportedOperationException(
          "cannot reach the field " + f.getDeclaringClass().getName() + "." + f.getName()
              + " (" + why + "): run with -javaagent:kioku-persist.jar, or with --add-exports"
              + " java.base/jdk.internal.misc=ALL-UNNAMED");
    }
  }
}
