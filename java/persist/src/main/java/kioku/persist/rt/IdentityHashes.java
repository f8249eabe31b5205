package kioku.persist.rt;

import java.lang.reflect.Field;
import sun.misc.Unsafe;

/**
 * An object's identity hash if the JVM has already given it one, without giving it one.
 *
 * <p>Objects that are not instrumented (arrays, JDK collections) keep their replica word in a
 * side table keyed by identity hash, and every such object made persistent got its hash then.
 * So an object that has no identity hash yet cannot be persistent: the barrier answers the
 * store into it at once. {@link System#identityHashCode} cannot tell "none yet" (it makes one,
 * a slow call into the JVM for every fresh array), so this reads HotSpot's mark word: on 64-bit
 * HotSpot, an unlocked object's mark holds its 31-bit hash at bit 8 (0 when it has none) and
 * 001 in its low three bits. That layout is checked when this class loads; on any other JVM
 * or header layout, and for an object whose mark is displaced (locked, or biased), this falls
 * back to {@code System.identityHashCode}, which is always right.
 */
public final class IdentityHashes {
  private IdentityHashes() {}

  /** Also Barrier's, for its class filter. */
  static final Unsafe U = unsafe();

  /** Whether the mark word has the layout described above (checked at class load). */
  static final boolean MARK_WORD = markWordMatches();

  /**
   * The identity hash of {@code o} (not null), or 0 if it has none yet. An identity hash is
   * never 0.
   */
  public static int peek(Object o) {
    if (MARK_WORD) {
      long mark = U.getLong(o, 0L);
      if ((mark & 7) == 1) return (int) (mark >>> 8) & 0x7fffffff;
    }
    return System.identityHashCode(o);
  }

  private static Unsafe unsafe() {
    try {
      Field f = Unsafe.class.getDeclaredField("theUnsafe");
      f.setAccessible(true);
      return (Unsafe) f.get(null);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /**
   * A fresh object and a fresh array read "no hash" (001 and nothing else in the hash bits),
   * and read their hashes once the JVM gave them one; a few of each, so that a layout that
   * merely happens to agree once is not taken for this one.
   */
  private static boolean markWordMatches() {
    if (!"64".equals(System.getProperty("sun.arch.data.model"))) return false;
    String vm = System.getProperty("java.vm.name", "");
    if (!vm.contains("HotSpot") && !vm.contains("OpenJDK")) return false;
    try {
      for (int i = 0; i < 8; i++) {
        Object[] fresh = {new Object(), new long[i + 1], new StringBuilder()};
        for (Object o : fresh) {
          long mark = U.getLong(o, 0L);
          if ((mark & 7) != 1 || ((mark >>> 8) & 0x7fffffff) != 0) return false;
          int h = System.identityHashCode(o);
          long after = U.getLong(o, 0L);
          if ((after & 7) != 1 || (int) ((after >>> 8) & 0x7fffffff) != h) return false;
        }
      }
      return true;
    } catch (RuntimeException | Error e) {
      return false;
    }
  }
}
