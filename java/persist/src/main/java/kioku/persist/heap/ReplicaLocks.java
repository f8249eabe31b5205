package kioku.persist.heap;

import java.util.concurrent.locks.ReentrantLock;

/**
 * Striped locks by replica address. A store into a replica holds its stripe while it reads the
 * old word, writes the new one and updates the replica's check words (and, outside a section,
 * until the drain), so that concurrent stores to one replica keep its checks exact and at most
 * one store per replica is ever in flight at a crash (the one wrong word
 * {@link ReplicaCheck#verify} repairs).
 */
final class ReplicaLocks {
  private static final int STRIPES = 1024;
  private final ReentrantLock[] locks = new ReentrantLock[STRIPES];

  ReplicaLocks() {
    for (int i = 0; i < STRIPES; i++) locks[i] = new ReentrantLock();
  }

  ReentrantLock of(long replica) {
    long h = replica * 0x9E3779B97F4A7C15L;
    return locks[(int) (h >>> 54) & (STRIPES - 1)];
  }
}
