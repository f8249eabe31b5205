package kioku.persist.heap;

/**
 * Progress of long heap work (recovery of millions of objects) on stderr, only when a person
 * is watching (a console) and the work is large; quiet in pipes and tests.
 */
final class Progress {
  private static final long LARGE = 1_000_000;
  private final String what;
  private final boolean show = System.console() != null;
  private long lastNanos = System.nanoTime();
  private boolean shown;

  Progress(String what) {
    this.what = what;
  }

  void tick(long done, long total) {
    if ((done & 0xffff) == 0) show(done, total);
  }

  /** As {@link #tick}, for a caller that reports now and then (not every step). */
  void show(long done, long total) {
    if (!show || total < LARGE) return;
    long now = System.nanoTime();
    if (now - lastNanos < 1_000_000_000L) return;
    lastNanos = now;
    shown = true;
    System.err.printf("\rkioku-persist: %s %d%%", what, done * 100 / total);
  }

  void finish(long objects) {
    if (shown) System.err.printf("\rkioku-persist: %s done, %d objects%n", what, objects);
  }
}
