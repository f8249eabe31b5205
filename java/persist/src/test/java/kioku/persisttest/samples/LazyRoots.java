package kioku.persisttest.samples;

import kioku.persist.DurableRoot;

/** A durable root and no static initializer (the agent adds one); invalid roots warn. */
public class LazyRoots {
  @DurableRoot public static Object root;
  @DurableRoot public static int primitive;
  @DurableRoot public Object instance;

  /** Assigns another class's root. */
  public static void assignOther(Object v) {
    Roots.list = null;
    root = v;
  }
}
