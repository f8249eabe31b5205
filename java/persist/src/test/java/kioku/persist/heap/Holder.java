package kioku.persist.heap;

import kioku.persist.DurableRoot;

/** Declares a durable root for the heap tests. */
public class Holder {
  @DurableRoot static Object root;
}
