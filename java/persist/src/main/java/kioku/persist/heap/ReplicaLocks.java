package kioku.persist.heap;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.locks.LockSupport;

/**
 * Striped locks by replica address. A store into a replica holds its stripe while it reads the
 * old word, writes the new one and updates the replica's check words (and, outside a section,
 * until they are durable), so that concurrent stores to one replica keep its checks exact and
 * at most one store per replica is ever in flight at a crash (the one wrong word
 * {@link ReplicaCheck#verify} repairs).
 *
 * <p>Each stripe is a spin lock: one compare-and-set to take it, one release store to give it
 * back. A {@code ReentrantLock} cost a second atomic (its volatile unlock) and its queue check on
 * every durable store; a stripe is held for a handful of plain stores (or, on a disk file, an
 * msync), so a waiter spins briefly, then yields its core (the holder may be descheduled on
 * a loaded machine), then sleeps (on a disk file the holder waits for msyncs). Stripes are a
 * cache line apart so that stores to different replicas do not share a line. Not reentrant:
 * a holder never takes a second stripe.
 */
final class ReplicaLocks {
  private static final int STRIPES = 1024;
  /** Ints per stripe: 64 bytes, one cache line. */
  private static final int SPREAD = 16;

  private static final VarHandle SLOT = MethodHandles.arrayElementVarHandle(int[].class);

  private final int[] held = new int[STRIPES * SPREAD];

  /** The stripe of the replica at {@code replica}. */
  static int stripeOf(long replica) {
    long h = replica * 0x9E3779B97F4A7C15L;
    return ((int) (h >>> 54) & (STRIPES - 1)) * SPREAD;
  }

  /** Takes the stripe of {@code replica} and returns it (for {@link #unlock}). */
  int lock(long replica) {
    int i = stripeOf(replica);
    if (!SLOT.compareAndSet(held, i, 0, 1)) contended(i);
    return i;
  }

  private void contended(int i) {
    long sleep = 1_000;
    for (int spins = 0; ; spins++) {
      if ((int) SLOT.getOpaque(held, i) == 0 && SLOT.compareAndSet(held, i, 0, 1)) return;
      if (spins < 64) {
        Thread.onSpinWait();
      } else if (spins < 128) {
        Thread.yield();
      } else {
        // The holder is making its store durable with msyncs (file: milliseconds) or is
        // descheduled: sleep, longer each time, up to a millisecond.
        LockSupport.parkNanos(sleep);
        sleep = Math.min(sleep * 2, 1_000_000);
      }
    }
  }

  /** Gives back a stripe {@link #lock} returned. */
  void unlock(int stripe) {
    SLOT.setRelease(held, stripe, 0);
  }
}
