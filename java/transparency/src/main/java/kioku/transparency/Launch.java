package kioku.transparency;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

/**
 * Runs the JUnit console launcher ({@code org.junit.platform.console.ConsoleLauncher}) after
 * printing one line on standard error that tells whether the library's classes were
 * instrumented (they implement kioku's {@code Persistent} only when the agent transformed
 * them), so the comparison knows each run was what it meant.
 * Every run uses this entry point (or {@link PersistentLauncher}, which calls {@link #probe}),
 * so the runs differ only in their JVM options.
 */
public final class Launch {
  private Launch() {}

  /** A class of the library under test that the agent gives the replica word. */
  static final String PROBE_CLASS = "org.apache.commons.collections4.map.HashedMap";

  static final String PROBE_PREFIX = "kioku-transparency: instrumented=";

  public static void main(String[] args) throws Throwable {
    System.err.println(probe());
    console(args);
  }

  /**
   * The console launcher's {@code main} (which exits the JVM with its status), found by name:
   * the launcher is on the run's class path, not this module's.
   */
  static void console(String[] args) throws Throwable {
    Method main =
        Class.forName("org.junit.platform.console.ConsoleLauncher").getMethod("main", String[].class);
    try {
      main.invoke(null, (Object) args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  /**
   * By name through the class loaders, so that without the agent this class needs nothing of
   * kioku (its runtime is on the boot class path only when the agent put it there).
   */
  static String probe() {
    boolean instrumented;
    try {
      Class<?> persistent = Class.forName("kioku.persist.rt.Persistent");
      instrumented = persistent.isAssignableFrom(Class.forName(PROBE_CLASS));
    } catch (ClassNotFoundException e) {
      instrumented = false;
    }
    return PROBE_PREFIX + instrumented;
  }
}
