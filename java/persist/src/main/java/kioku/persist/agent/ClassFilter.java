package kioku.persist.agent;

import java.util.List;

/**
 * Which classes get which instrumentation. Application classes (names outside the JDK and
 * kioku's runtime, loaded by a loader other than the boot and platform loaders) get the full
 * rewrite; the supported JDK collection classes get write barriers and failure-atomic sections.
 */
final class ClassFilter {
  private static final List<String> NOT_APPLICATION =
      List.of(
          "java/",
          "javax/",
          "jdk/",
          "sun/",
          "com/sun/",
          "kioku/persist/", // the runtime, this agent and the shaded ASM (kioku/persist/shaded/)
          "module-info");

  private final List<String> excluded;

  ClassFilter(List<String> excluded) {
    this.excluded = List.copyOf(excluded);
  }

  /** By name only: what the superclass test and "is the writer of clone() instrumented" use. */
  boolean isApplicationName(String internalName) {
    if (internalName == null) return false;
    for (String p : NOT_APPLICATION) if (internalName.startsWith(p)) return false;
    for (String p : excluded) if (internalName.startsWith(p)) return false;
    return true;
  }

  /** An application class by loader and JDK-prefix rules, but excluded by the options. */
  boolean isExcludedClass(ClassLoader loader, String internalName) {
    if (loader == null || loader == ClassLoader.getPlatformClassLoader()) return false;
    for (String p : NOT_APPLICATION) if (internalName.startsWith(p)) return false;
    for (String p : excluded) if (internalName.startsWith(p)) return true;
    return false;
  }

  /**
   * A class being loaded or retransformed. Platform-loader classes are JDK modules (java.sql,
   * jdk.*), whatever their package names.
   */
  boolean isApplicationClass(ClassLoader loader, String internalName) {
    return loader != null
        && loader != ClassLoader.getPlatformClassLoader()
        && isApplicationName(internalName);
  }

  static boolean isSupportedJdkClass(ClassLoader loader, String internalName) {
    return loader == null && JdkClasses.isSupported(internalName);
  }

  /** Whether code of this class (by name) calls the barriers itself. */
  boolean isInstrumentedName(String internalName) {
    return isApplicationName(internalName) || JdkClasses.isSupported(internalName);
  }
}
