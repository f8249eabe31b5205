package kioku.persisttest.agent;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedList;
import java.util.TreeMap;
import kioku.persist.rt.Instrumented;
import kioku.persist.rt.Persistent;

/** What the agent did, printed for the integration test (only meaningful with the agent). */
final class Report {
  private Report() {}

  static void print() {
    System.out.println("agentActive " + Instrumented.agentActive());
    for (Class<?> c : new Class<?>[] {ArrayList.class, HashMap.class, TreeMap.class,
        LinkedList.class, ArrayDeque.class, Arrays.class, String.class,
        new HashMap<>().keySet().getClass(), new TreeMap<>().entrySet().getClass()}) {
      System.out.println("supported " + c.getName() + " " + Instrumented.isSupportedJdkClass(c));
    }
    System.out.println("persistent " + CollectionsWorkload.class.getName() + "$Node "
        + Persistent.class.isAssignableFrom(CollectionsWorkload.Node.class));
    for (Class<?> c : new Class<?>[] {CollectionsWorkload.Node.class, CollectionsWorkload.Collider.class,
        ArrayList.class, HashMap.class, Thread.class, CollectionsWorkload.Job.class}) {
      System.out.println("intercepted " + c.getSimpleName() + " " + Instrumented.writesIntercepted(c));
    }
    System.out.println("failed " + new java.util.TreeSet<>(Instrumented.failed()));
  }
}
