package kioku.persist.heap;

/**
 * Brings every Java thread to a safepoint once: a global memory barrier. A thread stopped at a
 * safepoint poll, or one in native code or blocked, has made every store before that point
 * visible to the thread that asked (the JVM's own collectors rely on the same). Used when
 * persistence first becomes active (a writer that read "nothing is persistent" has its store
 * visible after it), and by {@link WriterFences} before writers start fencing again.
 */
final class Safepoint {
  private Safepoint() {}

  static void force() {
    // A thread dump is a safepoint operation in HotSpot: every thread stops at a poll.
    Thread.getAllStackTraces();
  }
}
