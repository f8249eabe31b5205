package kioku.examples;

import kioku.persist.DurableRoot;

/**
 * A loop storing into a {@code double[]}, compiled by C2 while no {@code double[]} is
 * persistent (its barrier then folds away: rt.Barrier's call sites per primitive array class),
 * keeps running while the main thread makes that array persistent. The first run stops the
 * loop, records the value of its last full pass and halts without closing the pool; the second
 * checks that the persistent array holds that value in every element: a compiled loop that
 * kept skipping the barrier after the array became persistent leaves older values there.
 */
public class HotArrayLoop {
  /** The root: the array and the value of the last pass written into all of it. */
  public static class State {
    double[] values;
    long lastPass = -1;
  }

  @DurableRoot static State state;

  static volatile boolean stop;
  static volatile double[] published;
  static volatile long passes;

  /** One invocation, many passes: the loop runs as OSR-compiled code until told to stop. */
  static long fill(double[] a) {
    long k = 0;
    while (!stop) {
      k++;
      for (int i = 0; i < a.length; i++) a[i] = k;
      passes = k;
    }
    return k;
  }

  public static void main(String[] args) throws Exception {
    if (state != null) {
      State s = state;
      long bad = 0;
      for (double v : s.values) if (v != s.lastPass) bad++;
      System.out.println("checked lastPass=" + s.lastPass + " length=" + s.values.length
          + " stale=" + bad);
      System.exit(0);
    }
    state = new State(); // persistence is on; no double[] is persistent yet
    double[] a = new double[4096];
    long[] last = new long[1];
    Thread w = new Thread(() -> last[0] = fill(a), "filler");
    w.start();
    // Long enough for C2 to compile the loop (OSR) with the barrier folded away.
    while (passes < 200_000) Thread.sleep(10);
    state.values = a; // makes a persistent while the compiled loop runs
    long at = passes;
    while (passes < at + 20_000) Thread.sleep(10);
    stop = true;
    w.join();
    state.lastPass = last[0];
    System.out.println("done lastPass=" + last[0] + " persistedAt=" + at);
    System.out.flush();
    Runtime.getRuntime().halt(0);
  }
}
