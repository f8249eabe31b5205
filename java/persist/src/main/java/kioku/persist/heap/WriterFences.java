package kioku.persist.heap;

import kioku.persist.rt.Barrier;

/**
 * When writers fence ({@link Barrier#fenced}): only while a make_persistent may run.
 *
 * <p>make_persistent and a writer of the object being copied form a Dekker pair: the copier
 * sets the object's replica word then reads its fields; the writer stores a field then reads
 * the word. Both need a StoreLoad fence between, or the copier may read the old value while
 * the writer reads "no replica" and the store is lost to the replica. A fence in every store
 * of the program costs more than everything else the barrier does, so the expensive side is
 * moved to the rare one (asymmetric Dekker): writers fence only while {@code fenced} is set;
 * a make_persistent that finds it clear sets it and then brings every thread through a
 * safepoint ({@link Safepoint#force}) before it copies anything. A writer that read the flag
 * clear has its store visible after that safepoint, so the copy or its verify sees it; a
 * writer that reads it set fences, as the thesis's writers always do.
 *
 * <p>The flag stays set while make_persistent calls keep coming (a burst pays for one
 * safepoint) and is cleared by a daemon thread once none has run for the idle time (default
 * 100 ms) and none is running. One state for the JVM, as the barrier is.
 */
final class WriterFences {
  private WriterFences() {}

  private static final Object LOCK = new Object();
  private static final long DEFAULT_IDLE_MILLIS = 100;

  /** Guarded by LOCK: make_persistent calls under way, the end of the last, the settings. */
  private static int running;

  private static long lastEnd;
  private static long idleNanos = DEFAULT_IDLE_MILLIS * 1_000_000L;
  private static Thread lowerer;
  private static long safepoints;

  /**
   * How long writers keep fencing after the last make_persistent; 0: always (never cleared).
   */
  static void setIdleMillis(long millis) {
    if (millis < 0) throw new IllegalArgumentException("fence.idle must be >= 0 ms");
    synchronized (LOCK) {
      idleNanos = millis * 1_000_000L;
    }
  }

  /** Before a make_persistent shades anything: from here on, every writer fences. */
  static void begin() {
    synchronized (LOCK) {
      running++;
      if (Barrier.fenced) return;
      Barrier.fenced = true;
      // Threads waiting for LOCK are blocked, hence at a safepoint already.
      Safepoint.force();
      safepoints++;
    }
  }

  /** After it: writers may stop fencing once none has run for the idle time. */
  static void end() {
    synchronized (LOCK) {
      running--;
      lastEnd = System.nanoTime();
      if (lowerer == null && idleNanos > 0) startLowerer();
    }
  }

  /**
   * Persistence became active without a make_persistent (recovery adopted replicas): writers
   * fence (the flag starts set) until the idle time has passed.
   */
  static void activated() {
    synchronized (LOCK) {
      lastEnd = System.nanoTime();
      if (lowerer == null && idleNanos > 0 && Barrier.fenced) startLowerer();
    }
  }

  /** Safepoints taken to turn the writers' fences on (statistics). */
  static long safepoints() {
    synchronized (LOCK) {
      return safepoints;
    }
  }

  private static void startLowerer() {
    Thread t = new Thread(WriterFences::lowerWhenIdle, "kioku-writer-fences");
    t.setDaemon(true);
    lowerer = t;
    t.start();
  }

  /** Clears the flag once idle, then ends (the next make_persistent starts another). */
  private static void lowerWhenIdle() {
    while (true) {
      long sleepNanos;
      synchronized (LOCK) {
        long idleFor = System.nanoTime() - lastEnd;
        if (idleNanos == 0 || !Barrier.fenced) {
          lowerer = null;
          return;
        }
        if (running == 0 && idleFor >= idleNanos) {
          Barrier.fenced = false;
          lowerer = null;
          return;
        }
        sleepNanos = Math.max(idleNanos - idleFor, idleNanos / 4);
      }
      try {
        Thread.sleep(Math.max(1, sleepNanos / 1_000_000L));
      } catch (InterruptedException e) {
        synchronized (LOCK) {
          lowerer = null;
        }
        return;
      }
    }
  }
}
