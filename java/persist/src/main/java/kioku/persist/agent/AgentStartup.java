package kioku.persist.agent;

import java.lang.instrument.Instrumentation;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import kioku.persist.KiokuPersist;
import kioku.persist.rt.Barrier;
import kioku.persist.rt.Instrumented;

/**
 * The agent's start-up, run from the boot loader (see {@link Agent}): open java.base to kioku,
 * install the transformer, retransform the supported JDK classes, start the runtime. An
 * expected failure is one line on stderr and exit status 2.
 */
public final class AgentStartup {
  private AgentStartup() {}

  public static void start(String agentArgs, Instrumentation inst, String agentJar) {
    try {
      run(agentArgs, inst, agentJar);
    } catch (AgentFailure f) {
      Log.failure(f.getMessage(), f.todo());
      Runtime.getRuntime().halt(2);
    } catch (Throwable t) {
      Log.failure("agent start-up failed: " + Log.reason(t), "report this as a kioku bug");
      Runtime.getRuntime().halt(2);
    }
  }

  private static void run(String agentArgs, Instrumentation inst, String agentJar)
      throws AgentFailure {
    if (Barrier.class.getClassLoader() != null) {
      throw new AgentFailure(
          "kioku's runtime was loaded by " + Barrier.class.getClassLoader() + ", not the boot loader",
          "pass kioku-persist.jar only with -javaagent (not in a custom class loader)");
    }
    if (Instrumented.agentActive()) {
      Log.line("the agent is already running; ignoring the second start");
      return;
    }
    if (!inst.isRetransformClassesSupported()) {
      throw new AgentFailure("this JVM cannot retransform classes",
          "use a JDK whose JVMTI supports retransformation and the jar's own manifest");
    }
    InstrumentOptions options = InstrumentOptions.parse(agentArgs);
    openJavaBase(inst);
    // The rewritten JDK classes of an earlier start, if this jar and JDK made them: their
    // field numbers are registered before anything else is rewritten.
    // Barrier's static initializer builds its call sites with java.lang.invoke, which uses
    // java.util: it runs now, before a retransformed java.util method can call Barrier (one
    // would otherwise find Barrier half initialized, its call sites still null).
    try {
      Class.forName(Barrier.class.getName(), true, null);
    } catch (ClassNotFoundException e) {
      throw new AssertionError(e); // it was loaded just above
    }
    TransformCache cache =
        TransformCache.open(options.cache(), java.nio.file.Path.of(agentJar), options.excluded());
    if (cache != null && !cache.registerFields()) cache = null;
    List<String> names;
    List<Class<?>> jdkClasses;
    if (cache != null && cache.classes() != null) {
      // A warm start: the cache holds every supported class as rewritten. Only those the JVM
      // has loaded already are retransformed (the JVM re-parses each, at a safepoint: most of
      // the agent's start-up when it was all ~150 of them); the others get their saved bytes
      // from the transformer when they load, if they ever do. The transformer goes in first,
      // so a class is either loaded before the list is taken (and retransformed) or after the
      // transformer is in (and rewritten as it loads). With the cache, rewriting a JDK class
      // is a lookup; the classes that lookup and the choice before it use must be loaded
      // before the transformer is in, or loading one would call the transformer, which needs
      // it: a ClassCircularityError (JdkClasses was one).
      names = cache.classes();
      Set<String> wanted = supportedAmong(names);
      KiokuTransformer transformer = new KiokuTransformer(options, cache);
      transformer.loadWhatJdkRewritesUse();
      inst.addTransformer(transformer, true);
      Instrumented.agentStarted();
      jdkClasses = loadedAmong(inst, wanted);
    } else {
      // Loaded before the transformer exists, so none is transformed while it loads (the
      // transformer itself may use them: ASM); then all are retransformed together, and the
      // cache records all of them.
      names = supportedJdkClassNames();
      jdkClasses = load(names);
      inst.addTransformer(new KiokuTransformer(options, cache), true);
      Instrumented.agentStarted();
    }
    retransform(inst, jdkClasses);
    if (cache != null && cache.classes() != null) {
      cache.saveIfChanged(names); // only if a class was missing from it
    } else if (cache != null) {
      List<String> loaded = new ArrayList<>();
      for (Class<?> c : jdkClasses) loaded.add(internalName(c));
      cache.saveIfChanged(loaded);
    }
    try {
      KiokuPersist.startFromAgent(agentArgs);
    } catch (RuntimeException | LinkageError e) {
      String why = e.getMessage() != null ? e.getMessage() : e.toString();
      throw new AgentFailure("cannot start the runtime: " + why.replace('\n', ' '),
          "check the agent options");
    }
  }

  /**
   * Lets java.base read the boot loader's unnamed module (where Barrier is), so retransformed
   * java.util code links to it; opens java.lang and java.util to it, so the runtime can reach
   * private fields such as ArrayList.elementData reflectively; and exports jdk.internal.misc,
   * whose Unsafe gives the field offsets of records (sun.misc.Unsafe refuses them).
   */
  private static void openJavaBase(Instrumentation inst) throws AgentFailure {
    Module base = Object.class.getModule();
    Module kioku = Barrier.class.getModule();
    if (!inst.isModifiableModule(base)) {
      throw new AgentFailure("cannot open java.base to kioku", "use a JDK that allows it (17+)");
    }
    try {
      inst.redefineModule(
          base,
          Set.of(kioku),
          Map.of("jdk.internal.misc", Set.of(kioku)),
          Map.of("java.lang", Set.of(kioku), "java.util", Set.of(kioku),
              "java.util.concurrent", Set.of(kioku), "java.util.concurrent.atomic", Set.of(kioku)),
          Set.of(),
          Map.of());
    } catch (RuntimeException e) {
      throw new AgentFailure("cannot open java.base to kioku", "use a JDK that allows it (17+)", e);
    }
  }

  /** The supported classes and their nest members, by name (some may not be in this JDK). */
  private static List<String> supportedJdkClassNames() {
    Set<String> names = new LinkedHashSet<>(JdkClasses.TOP_LEVEL);
    names.addAll(JdkClasses.NESTED);
    for (String outer : JdkClasses.WITH_NESTED) {
      byte[] bytes = ClassInfoSource.classFile(null, outer);
      if (bytes != null) names.addAll(ClassInfoReader.read(bytes, false).nestMembers());
    }
    return new ArrayList<>(names);
  }

  /** Those of the named classes that exist in this JDK and are supported, loaded. */
  private static List<Class<?>> load(List<String> names) {
    List<Class<?>> classes = new ArrayList<>();
    for (String name : names) {
      if (!JdkClasses.isSupported(name)) continue;
      try {
        classes.add(Class.forName(name.replace('/', '.'), false, null));
      } catch (ClassNotFoundException | LinkageError e) {
        // Not in this JDK version: nothing to support.
      }
    }
    return classes;
  }

  /** The supported classes among {@code names}, by binary name (java.util.HashMap$Node). */
  private static Set<String> supportedAmong(List<String> names) {
    Set<String> wanted = new java.util.HashSet<>();
    for (String name : names) {
      if (JdkClasses.isSupported(name)) wanted.add(name.replace('/', '.'));
    }
    return wanted;
  }

  /** Those of the {@code wanted} classes (binary names) that the boot loader has loaded. */
  private static List<Class<?>> loadedAmong(Instrumentation inst, Set<String> wanted) {
    List<Class<?>> classes = new ArrayList<>();
    for (Class<?> c : inst.getAllLoadedClasses()) {
      if (c.getClassLoader() == null && wanted.contains(c.getName())) classes.add(c);
    }
    return classes;
  }

  /**
   * All at once (one safepoint); if the JVM refuses any result, the whole batch is rolled
   * back, so then one by one to find which class it refused.
   */
  private static void retransform(Instrumentation inst, List<Class<?>> classes) {
    List<Class<?>> modifiable = new ArrayList<>();
    for (Class<?> c : classes) {
      if (inst.isModifiableClass(c)) {
        modifiable.add(c);
      } else {
        refused(c, "the JVM does not allow modifying it");
      }
    }
    try {
      inst.retransformClasses(modifiable.toArray(new Class<?>[0]));
      return;
    } catch (Throwable batch) {
      for (Class<?> c : modifiable) Instrumented.forget(internalName(c));
    }
    for (Class<?> c : modifiable) {
      try {
        inst.retransformClasses(c);
      } catch (Throwable t) {
        refused(c, "the JVM refused the instrumented class: " + Log.reason(t));
      }
    }
  }

  private static void refused(Class<?> c, String reason) {
    Instrumented.transformFailed(internalName(c));
    Log.line("cannot instrument " + c.getName() + ": " + reason
        + "; it runs unchanged and its objects cannot be made persistent");
  }

  private static String internalName(Class<?> c) {
    return c.getName().replace('.', '/');
  }
}
