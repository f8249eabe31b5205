package kioku.stress;

import kioku.persist.rt.Barrier;

/**
 * Lets the next race start with writers not fencing, as a program that has not made anything
 * persistent for a while runs (the runtime lowers the flag after 100 ms without a
 * make_persistent; a stress run makes one every few microseconds, so it would never be low).
 * Called from arbiters, when no actor of the test is running: the next make_persistent finds
 * the flag low, raises it and brings every thread through a safepoint before copying, which is
 * the path under test.
 */
final class Fences {
  private Fences() {}

  static void lower() {
    Barrier.fenced = false;
  }
}
