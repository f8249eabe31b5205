package kioku.persist.agent;

import java.lang.instrument.ClassFileTransformer;
import java.security.ProtectionDomain;
import kioku.persist.rt.Instrumented;

/**
 * The agent's one transformer: application classes at load time, supported JDK classes at
 * retransformation (or load). A failure leaves the class unchanged, says so in one line and is
 * recorded in {@link Instrumented#failed()}.
 */
final class KiokuTransformer implements ClassFileTransformer {
  private final ClassFilter filter;
  private final AppClassTransformer app;
  private final JdkCollectionTransformer jdk;
  private final LoadedClasses shaped = new LoadedClasses();
  /** The JDK classes as an earlier start rewrote them, or null. */
  private final TransformCache cache;

  private final boolean verbose;

  KiokuTransformer(InstrumentOptions options) {
    this(options, null);
  }

  KiokuTransformer(InstrumentOptions options, TransformCache cache) {
    this.cache = cache;
    this.verbose = options.verbose();
    this.filter = new ClassFilter(options.excluded());
    ClassInfoSource source = new ClassInfoSource();
    this.app = new AppClassTransformer(source, filter, options.verbose());
    this.jdk = new JdkCollectionTransformer(source, filter, options.verbose());
  }

  /**
   * Runs the choice {@link #transform} makes for a JDK class, and the cache lookup, once on a
   * class that is loaded already, so that every class they use is loaded before this
   * transformer is installed (see AgentStartup: on a warm start JDK classes are rewritten as
   * they load, and a class this path loads for the first time would come back to it).
   */
  void loadWhatJdkRewritesUse() {
    String name = "java/util/ArrayList";
    if (ClassFilter.isSupportedJdkClass(null, name) && cache != null) cache.peek(name);
    filter.isApplicationClass(null, name);
    filter.isExcludedClass(null, name);
  }

  @Override
  public byte[] transform(
      Module module,
      ClassLoader loader,
      String className,
      Class<?> classBeingRedefined,
      ProtectionDomain domain,
      byte[] bytes) {
    if (className == null || bytes == null) return null;
    boolean isJdk = ClassFilter.isSupportedJdkClass(loader, className);
    if (!isJdk && !filter.isApplicationClass(loader, className)) {
      if (filter.isExcludedClass(loader, className)) Instrumented.classExcluded(className);
      return null;
    }
    try {
      if (isJdk) {
        byte[] out = cache != null ? cache.lookup(className) : null;
        if (out == null) {
          out = jdk.transform(bytes);
          if (cache != null) cache.record(className, out);
        } else if (verbose) {
          Log.line("instrumented " + Names.dotted(className) + ": as rewritten by an earlier start");
        }
        Instrumented.jdkClassTransformed(className);
        return out;
      }
      // A retransformation must reproduce the load-time result exactly (same members); a
      // class loaded before the agent (agentmain) can only get new method bodies.
      boolean mayAddMembers = classBeingRedefined == null || shaped.contains(loader, className);
      byte[] out = app.transform(loader, bytes, mayAddMembers);
      if (out != null && classBeingRedefined == null) shaped.add(loader, className);
      return out;
    } catch (Throwable t) {
      Instrumented.transformFailed(className);
      Log.line("cannot instrument " + Names.dotted(className) + ": " + Log.reason(t)
          + "; it runs unchanged and its objects cannot be made persistent");
      return null;
    }
  }
}
