package kioku.persisttest.agent;

import java.util.TreeSet;
import kioku.persist.rt.Instrumented;
import kioku.persist.rt.Persistent;

/**
 * Loads a class the agent cannot instrument (made by the integration test) and reports what
 * the agent recorded; also whether an excluded class was left alone.
 */
public final class FailureProbe {
  private FailureProbe() {}

  public static void main(String[] args) throws Exception {
    Class<?> huge = Class.forName(args[0]);
    Object o = huge.getConstructor().newInstance();
    System.out.println("fill " + huge.getMethod("fill").invoke(o));
    System.out.println("huge persistent " + (o instanceof Persistent));
    System.out.println("failed " + new TreeSet<>(Instrumented.failed()));
    System.out.println("node persistent "
        + Persistent.class.isAssignableFrom(CollectionsWorkload.Node.class));
    System.out.println("node intercepted " + Instrumented.writesIntercepted(CollectionsWorkload.Node.class));
    System.out.println("huge intercepted " + Instrumented.writesIntercepted(huge));
  }
}
