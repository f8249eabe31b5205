package kioku.persist.heap;

import java.lang.reflect.Field;
import sun.misc.Unsafe;

/**
 * sun.misc.Unsafe, for what reflection cannot do at the speed the barrier needs: reading any
 * field of an object by offset while copying it to its replica, writing final fields while
 * rebuilding objects at recovery, allocating an instance without running a constructor, and
 * compare-and-set of the replica word. Every use passes an offset obtained from
 * objectFieldOffset of a field of the object's own class, or an array offset within bounds.
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
}
