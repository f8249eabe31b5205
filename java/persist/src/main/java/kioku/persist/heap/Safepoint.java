package kioku.persist.heap;

/**
 * Brings every Java thread to a safepoint once. Used when persistence first becomes active:
 * a writer that read "nothing is persistent" before this point has its store visible after
 * it, so the first copy cannot miss it (writers fence once persistence is active).
 */
final class Safepoint {
  private Safepoint() {}

  static void force() {
    // A thread dump is a safepoint operation in HotSpot: every thread stops at a poll, and
    // its earlier stores are visible to the thread that asked.
    Thread.getAllStackTraces();
  }
}
