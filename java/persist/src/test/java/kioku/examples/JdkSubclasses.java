package kioku.examples;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import kioku.persist.DurableRoot;

/**
 * Application subclasses of JDK collections, persistent: their inherited state (size, table,
 * elements) is written by the JDK's own code. Each run adds one entry to each and stops without
 * closing the pool (Runtime.halt), so only what the barriers sent to the pool survives; the
 * next run prints what it finds first.
 */
public class JdkSubclasses {
  /** A list with a field of its own. */
  public static class Tally extends ArrayList<String> {
    long runs;
  }

  /** A map; the JDK's putVal writes its table and size. */
  public static class Index extends HashMap<String, Integer> {}

  /** A deque; the JDK's addLast writes its head, tail and array. */
  public static class Pending extends ArrayDeque<Integer> {}

  /** The three, one root. */
  public static class State {
    Tally tally = new Tally();
    Index index = new Index();
    Pending pending = new Pending();
  }

  @DurableRoot static State state;

  public static void main(String[] args) {
    if (state == null) state = new State();
    State s = state;
    System.out.println("found runs=" + s.tally.runs + " tally=" + s.tally
        + " index=" + new java.util.TreeMap<>(s.index) + " pending=" + s.pending);
    long n = s.tally.runs + 1;
    s.tally.add("r" + n);
    s.index.put("r" + n, (int) n);
    s.pending.addLast((int) n);
    if (s.pending.size() > 2) s.pending.pollFirst();
    s.tally.runs = n;
    System.out.println("done runs=" + n);
    System.out.flush();
    Runtime.getRuntime().halt(0);
  }
}
