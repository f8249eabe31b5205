package kioku.persist.agent;

import java.io.File;
import java.lang.instrument.Instrumentation;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.security.CodeSource;
import java.util.jar.JarFile;

/**
 * The {@code -javaagent} entry point. This class is loaded by the system class loader; before
 * touching any other kioku class it puts its own jar on the boot class path, so that the
 * runtime, {@code Barrier} and the rest of the agent are loaded once, by the boot loader, where
 * retransformed java.util code can call them. The real start-up ({@link AgentStartup}) is
 * then reached by name through the boot loader.
 */
public final class Agent {
  private Agent() {}

  public static void premain(String agentArgs, Instrumentation inst) {
    launch(agentArgs, inst);
  }

  public static void agentmain(String agentArgs, Instrumentation inst) {
    launch(agentArgs, inst);
  }

  private static void launch(String agentArgs, Instrumentation inst) {
    File jar;
    try {
      jar = agentJar();
      inst.appendToBootstrapClassLoaderSearch(new JarFile(jar));
    } catch (Exception | LinkageError e) {
      fail("cannot put the agent jar on the boot class path (" + e + ")",
          "start the JVM with -javaagent:/path/to/kioku-persist.jar (the jar as built)");
      return;
    }
    Method start;
    try {
      Class<?> startup = Class.forName("kioku.persist.agent.AgentStartup", true, null);
      start = startup.getMethod("start", String.class, Instrumentation.class, String.class);
    } catch (ReflectiveOperationException | LinkageError e) {
      fail("cannot load the agent from the boot class path (" + e + ")",
          "use the kioku-persist.jar as built, which contains the agent and ASM");
      return;
    }
    try {
      start.invoke(null, agentArgs, inst, jar.getPath());
    } catch (InvocationTargetException e) {
      fail("agent start-up failed (" + e.getCause() + ")", "report this as a kioku bug");
    } catch (IllegalAccessException e) {
      fail("cannot start the agent (" + e + ")", "report this as a kioku bug");
    }
  }

  private static File agentJar() throws Exception {
    CodeSource cs = Agent.class.getProtectionDomain().getCodeSource();
    if (cs == null || cs.getLocation() == null) {
      throw new IllegalStateException("the agent class has no code source");
    }
    return new File(cs.getLocation().toURI());
  }

  /** Kept here rather than in {@link Log}: no other kioku class may load before the jar moves. */
  private static void fail(String what, String todo) {
    System.err.println("kioku-persist: " + what + ": " + todo);
    Runtime.getRuntime().halt(2);
  }
}
