package kioku.persist.heap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * The ownership protocol of the replica stripes: a thread taking a stripe over waits for the
 * owner's store in progress to end (never two stores in one stripe at once), two threads taking
 * each other's stripes both get them, and the budget of handshakes ends ownership for good.
 */
class ReplicaLocksTest {
  private static Thread started(String name, AtomicReference<Throwable> failed, Runnable r) {
    Thread t = new Thread(() -> {
      try {
        r.run();
      } catch (Throwable e) {
        failed.compareAndSet(null, e);
      }
    }, name);
    t.start();
    return t;
  }

  @Test
  void aTakerWaitsUntilTheOwnersStoreHasEnded() throws Exception {
    ReplicaLocks locks = new ReplicaLocks();
    long replica = 1L << 20;
    AtomicReference<Throwable> failed = new AtomicReference<>();
    CountDownLatch inside = new CountDownLatch(1);
    CountDownLatch release = new CountDownLatch(1);
    AtomicBoolean ownerDone = new AtomicBoolean();
    Thread owner = started("owner", failed, () -> {
      int t = locks.lock(replica);
      assertTrue(locks.ownedByMe(replica));
      inside.countDown();
      try {
        release.await();
      } catch (InterruptedException e) {
        throw new AssertionError(e);
      }
      ownerDone.set(true);
      locks.unlock(t);
    });
    assertTrue(inside.await(10, TimeUnit.SECONDS));
    AtomicBoolean overlapped = new AtomicBoolean();
    AtomicBoolean taken = new AtomicBoolean();
    Thread taker = started("taker", failed, () -> {
      int t = locks.lock(replica);
      if (!ownerDone.get()) overlapped.set(true);
      taken.set(true);
      locks.unlock(t);
    });
    Thread.sleep(300);
    assertFalse(taken.get(), "the taker got the stripe while its owner was storing");
    release.countDown();
    owner.join(10_000);
    taker.join(10_000);
    if (failed.get() != null) throw new AssertionError(failed.get());
    assertTrue(taken.get(), "the taker never got the stripe");
    assertFalse(overlapped.get());
    assertEquals(1, locks.handshakes());
  }

  @Test
  void twoThreadsTakingEachOthersStripesBothGetThem() throws Exception {
    for (int round = 0; round < 20; round++) {
      ReplicaLocks locks = new ReplicaLocks();
      long r1 = 1L << 20;
      long r2 = r1 + 64;
      while (ReplicaLocks.stripeOf(r2) == ReplicaLocks.stripeOf(r1)) r2 += 64;
      long first = r1;
      long second = r2;
      AtomicReference<Throwable> failed = new AtomicReference<>();
      CountDownLatch owned = new CountDownLatch(2);
      CountDownLatch go = new CountDownLatch(1);
      Runnable[] bodies = new Runnable[2];
      for (int k = 0; k < 2; k++) {
        long mine = k == 0 ? first : second;
        long theirs = k == 0 ? second : first;
        bodies[k] = () -> {
          locks.unlock(locks.lock(mine));
          owned.countDown();
          try {
            go.await();
          } catch (InterruptedException e) {
            throw new AssertionError(e);
          }
          for (int i = 0; i < 1000; i++) {
            locks.unlock(locks.lock(theirs));
            locks.unlock(locks.lock(mine));
          }
        };
      }
      Thread a = started("a", failed, bodies[0]);
      Thread b = started("b", failed, bodies[1]);
      assertTrue(owned.await(10, TimeUnit.SECONDS));
      go.countDown();
      a.join(60_000);
      b.join(60_000);
      assertFalse(a.isAlive() || b.isAlive(), "two takers deadlocked");
      if (failed.get() != null) throw new AssertionError(failed.get());
      // Each stripe moved at least once (to the other thread) and at most twice (then shared).
      int h = locks.handshakes();
      assertTrue(h >= 2 && h <= 4, h + " handshakes for two stripes");
    }
  }

  @Test
  void afterTheBudgetNothingIsOwned() throws Exception {
    ReplicaLocks locks = new ReplicaLocks();
    AtomicReference<Throwable> failed = new AtomicReference<>();
    long base = 1L << 20;
    // Each stripe taken by this thread, then taken over by another: one handshake each.
    for (int k = 0; k < ReplicaLocks.HANDOVERS; k++) {
      long r = base + 8L * k * 4096;
      locks.unlock(locks.lock(r));
      started("taker" + k, failed, () -> locks.unlock(locks.lock(r))).join(10_000);
    }
    if (failed.get() != null) throw new AssertionError(failed.get());
    assertEquals(ReplicaLocks.HANDOVERS, locks.handshakes());
    long fresh = base + 8L * 4096 * 5000;
    locks.unlock(locks.lock(fresh));
    assertTrue(locks.shared(fresh), "a free stripe became owned after the budget was spent");
    assertFalse(locks.ownedByMe(base), "an owned stripe survived the last handshake");
  }
}
