package kioku.examples;

import kioku.persist.DurableRoot;

/**
 * A durable counter: each run adds one and prints the count; "hold" keeps the pool open
 * until killed (to test a pool in use).
 */
public class Counter {
  /** The state: one field, so a test can compile an incompatible version of it. */
  public static class State {
    long count;
  }

  @DurableRoot static State state;

  public static void main(String[] args) throws Exception {
    if (state == null) state = new State();
    state.count = state.count + 1;
    System.out.println("count " + state.count);
    System.out.flush();
    if (args.length > 0 && args[0].equals("hold")) Thread.sleep(60_000);
  }
}
