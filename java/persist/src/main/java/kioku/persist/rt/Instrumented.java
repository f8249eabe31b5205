package kioku.persist.rt;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What the agent instrumented, for the runtime: it makes persistent only objects whose writes
 * are intercepted. Application classes show it by implementing {@link Persistent}; JDK
 * classes (which cannot get new members) are listed here once their retransformation
 * succeeded. Strings, boxes and arrays are the runtime's own business.
 */
public final class Instrumented {
  private Instrumented() {}

  private static volatile boolean active;
  private static final Set<String> supported = ConcurrentHashMap.newKeySet();
  private static final Set<String> failed = ConcurrentHashMap.newKeySet();
  private static final Set<String> excluded = ConcurrentHashMap.newKeySet();

  /** Whether {@code c} is a JDK class whose writes (all of them) call {@link Barrier}. */
  public static boolean isSupportedJdkClass(Class<?> c) {
    return c.getClassLoader() == null && supported.contains(c.getName().replace('.', '/'));
  }

  /**
   * Whether every write to an object of class {@code c} calls {@link Barrier}: each class from
   * {@code c} up to Object was instrumented (an application class not excluded and whose
   * transformation did not fail; a supported JDK class) or has no state its own code changes
   * after construction (Object, Enum, Record, Number). Implementing {@link Persistent} is not
   * enough: a subclass may have been excluded or have failed, and an inherited JDK superclass
   * (Thread, Vector...) writes its fields without barriers.
   */
  public static boolean writesIntercepted(Class<?> c) {
    if (c.isArray() || c.isPrimitive() || c.isInterface()) return false;
    for (Class<?> k = c; k != null; k = k.getSuperclass()) {
      String name = k.getName().replace('.', '/');
      if (k.getClassLoader() == null || k.getClassLoader() == ClassLoader.getPlatformClassLoader()) {
        if (!STATELESS_JDK_BASES.contains(name) && !isSupportedJdkClass(k)) return false;
      } else if (failed.contains(name) || excluded.contains(name)) {
        return false;
      }
    }
    return active;
  }

  /** Whether the agent left this application class unchanged (excluded, or it failed). */
  public static boolean skipped(Class<?> c) {
    String name = c.getName().replace('.', '/');
    return failed.contains(name) || excluded.contains(name);
  }

  private static final Set<String> STATELESS_JDK_BASES =
      Set.of("java/lang/Object", "java/lang/Enum", "java/lang/Record", "java/lang/Number");

  /** Whether the agent installed its instrumentation in this JVM. */
  public static boolean agentActive() {
    return active;
  }

  /** Internal names of the classes whose transformation failed (they run unchanged). */
  public static Set<String> failed() {
    return Set.copyOf(failed);
  }

  // Called by the agent.

  /** The transformer is installed. */
  public static void agentStarted() {
    active = true;
  }

  /** A supported JDK class now runs instrumented. */
  public static void jdkClassTransformed(String internalName) {
    failed.remove(internalName);
    supported.add(internalName);
  }

  /** A class could not be instrumented (or the JVM refused the result). */
  public static void transformFailed(String internalName) {
    supported.remove(internalName);
    failed.add(internalName);
  }

  /** An application class left alone because the agent options exclude it. */
  public static void classExcluded(String internalName) {
    excluded.add(internalName);
  }

  /** A retransformation is about to be retried: forget the earlier outcome. */
  public static void forget(String internalName) {
    supported.remove(internalName);
    failed.remove(internalName);
  }
}
