package kioku.persist.heap;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.concurrent.locks.LockSupport;

/**
 * Exclusion per stripe of replicas (stripes by replica address). A store into a replica holds
 * its stripe while it reads the old word, writes the new one and updates the replica's check
 * words (and, outside a section, until they are durable), so that concurrent stores to one
 * replica keep its checks exact and at most one store per replica is ever in flight at a crash
 * (the one wrong word {@link ReplicaCheck#verify} repairs).
 *
 * <p><b>Stripes owned by a thread.</b> Most programs store into a given object from one thread
 * at a time, so a stripe is first <em>owned</em>: the first thread to store into it takes it
 * with one compare-and-set and keeps it, and its later stores take no atomic at all — a plain
 * store of its own {@link Owner#storing} counter (odd while it stores), a plain read of the
 * stripe's owner, and a plain store at the end. Another thread that wants the stripe takes it
 * over with a handshake: it marks the stripe {@link #REVOKING} (a compare-and-set), brings
 * every thread through a safepoint ({@link Safepoint#force}), then waits until the owner's
 * counter, if it was odd, moves on. After the safepoint the owner either was inside a store
 * (its odd counter is visible; the taker waits for it to end, and its release store of the even
 * counter makes the store's writes visible to the taker) or reads the stripe's new state
 * before its next store (the safepoint orders its reads after the mark) — the asymmetric
 * Dekker protocol {@link WriterFences} uses, with the expensive side taken by the rare
 * takeover. The owner's store never waits while its counter is odd, so two takers cannot wait
 * on each other.
 *
 * <p>A handshake costs a thread dump (tens of microseconds to milliseconds), so ownership only
 * moves once per stripe: a stripe wanted by a third owner, or any stripe once the heap has
 * spent {@link #HANDOVERS} handshakes, is <em>shared</em> for good: a spin lock, one
 * compare-and-set to take it and a release store to give it back, as before ownership. When
 * the budget runs out every owned stripe becomes shared in one last handshake, and free
 * stripes are shared from their first store: a program whose threads pass objects around ends
 * on the shared stripes after at most {@code HANDOVERS + 1} handshakes.
 *
 * <p>A shared stripe's waiter spins briefly, then yields its core (the holder may be
 * descheduled on a loaded machine), then sleeps (on a disk file the holder waits for msyncs).
 * Lock words are a cache line apart so that stores to different replicas do not share a line.
 * Not reentrant: a holder never takes a second stripe.
 */
final class ReplicaLocks {
  private static final int STRIPES = 1024;
  /** Ints per lock word: 64 bytes, one cache line. */
  private static final int SPREAD = 16;
  /** Takeovers by handshake a heap allows before every stripe is shared. */
  static final int HANDOVERS = 32;
  /** Set in a token from {@link #lock} when the stripe is owned (no lock word to give back). */
  private static final int OWNED = 1 << 30;

  /** A stripe's state while it is shared. */
  private static final Object SHARED = new Object();
  /** A stripe's state while a taker waits for its owner to leave it. */
  private static final Object REVOKING = new Object();

  private static final VarHandle SLOT = MethodHandles.arrayElementVarHandle(int[].class);
  private static final VarHandle STATE = MethodHandles.arrayElementVarHandle(Object[].class);
  private static final VarHandle STORING;

  static {
    try {
      STORING = MethodHandles.lookup().findVarHandle(Owner.class, "storing", long.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /** A thread's identity as a stripe owner. */
  static final class Owner {
    final Thread thread = Thread.currentThread();
    /** Odd while the thread stores into an owned stripe; written by its thread only. */
    long storing;
  }

  private final int[] held = new int[STRIPES * SPREAD];
  /** Per stripe: null (free), an {@link Owner}, {@link #SHARED} or {@link #REVOKING}. */
  private final Object[] states = new Object[STRIPES];
  /** Stripes that changed owner once (guarded by {@code this}). */
  private final boolean[] movedOnce = new boolean[STRIPES];
  /** Handshakes so far (guarded by {@code this}); past {@link #HANDOVERS}, nothing is owned. */
  private int handshakes;
  /** False once the budget is spent: free stripes become shared, not owned. */
  private volatile boolean owning = true;

  private final ThreadLocal<Owner> local = ThreadLocal.withInitial(Owner::new);

  /** The calling thread's {@link Owner} (callers on a hot path keep it, see Sections.Section). */
  Owner mine() {
    return local.get();
  }

  /** The stripe of the replica at {@code replica}. */
  static int stripeOf(long replica) {
    long h = replica * 0x9E3779B97F4A7C15L;
    return (int) (h >>> 54) & (STRIPES - 1);
  }

  /** {@link #lock(long, Owner)} for callers that have not looked their owner up. */
  int lock(long replica) {
    return lock(replica, local.get());
  }

  /**
   * Takes the stripe of {@code replica} for {@code me} (the calling thread's owner) and returns
   * a token for {@link #unlock}.
   */
  int lock(long replica, Owner me) {
    int i = stripeOf(replica);
    // Odd before the owner is read: a taker that sees it even after its safepoint knows this
    // store reads its mark. The read may be made before the odd store (the CPU, or the JIT,
    // which orders no load after a release store), but not before the release's compiler
    // barrier (HotSpot's barriers order every memory access; this also keeps the read in any
    // loop), and in compiled code no safepoint poll lies between that barrier and the read:
    // a thread stopped by the taker's safepoint is before both or past both. (Interpreted, it
    // keeps program order: stopped between them, its odd counter makes the taker wait, and
    // its read then finds the mark and makes the counter even again.)
    STORING.setRelease(me, me.storing + 1);
    if (states[i] == me) return i | OWNED;
    STORING.setRelease(me, me.storing + 1);
    return lockSlow(i, me);
  }

  /**
   * {@link #lock(long, Owner)} if {@code me} owns the stripe of {@code replica} (the token), -1
   * otherwise (nothing taken: the caller goes the general way).
   */
  int lockOwned(long replica, Owner me) {
    int i = stripeOf(replica);
    STORING.setRelease(me, me.storing + 1);
    if (states[i] == me) return i | OWNED;
    STORING.setRelease(me, me.storing + 1);
    return -1;
  }

  /** Gives back what {@link #lock} took. */
  void unlock(int token, Owner me) {
    if ((token & OWNED) != 0) {
      STORING.setRelease(me, me.storing + 1); // the store's writes, visible to a taker
    } else {
      SLOT.setRelease(held, token * SPREAD, 0);
    }
  }

  /** {@link #unlock(int, Owner)} for callers that have not looked their owner up. */
  void unlock(int token) {
    unlock(token, (token & OWNED) != 0 ? local.get() : null);
  }

  /** Whether the stripe of {@code replica} is shared (for tests). */
  boolean shared(long replica) {
    return STATE.getVolatile(states, stripeOf(replica)) == SHARED;
  }

  /** Whether the stripe of {@code replica} is owned by the calling thread (for tests). */
  boolean ownedByMe(long replica) {
    return STATE.getVolatile(states, stripeOf(replica)) == local.get();
  }

  /** Handshakes made so far (for tests and statistics). */
  synchronized int handshakes() {
    return handshakes;
  }

  private int lockSlow(int i, Owner me) {
    int waits = 0;
    while (true) {
      Object s = STATE.getVolatile(states, i);
      if (s == SHARED) {
        lockShared(i);
        return i;
      }
      if (s == null) {
        Object next = owning ? me : SHARED;
        STATE.compareAndSet(states, i, null, next);
        continue;
      }
      if (s == me) {
        STORING.setRelease(me, me.storing + 1);
        if (STATE.getVolatile(states, i) == me) return i | OWNED;
        STORING.setRelease(me, me.storing + 1); // taken over meanwhile: never wait while odd
        continue;
      }
      if (s == REVOKING) {
        pause(waits++);
        continue;
      }
      takeOver(i, (Owner) s, me);
    }
  }

  /**
   * Takes stripe {@code i} from {@code from} with a handshake: to {@code me} if the stripe has
   * not moved before and the budget allows, shared otherwise; every owned stripe becomes shared
   * once the budget is spent.
   */
  private synchronized void takeOver(int i, Owner from, Owner me) {
    if (!STATE.compareAndSet(states, i, from, REVOKING)) return; // changed: the caller retries
    boolean last = ++handshakes >= HANDOVERS;
    Map<Owner, Long> owners = new IdentityHashMap<>();
    owners.put(from, 0L);
    if (last) {
      owning = false;
      for (int k = 0; k < STRIPES; k++) {
        Object s = STATE.getVolatile(states, k);
        while (s instanceof Owner o) {
          if (STATE.compareAndSet(states, k, o, REVOKING)) {
            owners.put(o, 0L);
            break;
          }
          s = STATE.getVolatile(states, k);
        }
      }
    }
    Safepoint.force();
    for (Owner o : owners.keySet()) {
      long q = (long) STORING.getAcquire(o);
      if ((q & 1) == 0) continue;
      for (int waits = 0; (long) STORING.getAcquire(o) == q && o.thread.isAlive(); waits++) {
        pause(waits);
      }
    }
    VarHandle.acquireFence();
    if (last) {
      for (int k = 0; k < STRIPES; k++) {
        if (STATE.getVolatile(states, k) == REVOKING) STATE.setVolatile(states, k, SHARED);
      }
    } else {
      Object next = movedOnce[i] ? SHARED : me;
      movedOnce[i] = true;
      STATE.setVolatile(states, i, next);
    }
  }

  private void lockShared(int stripe) {
    int i = stripe * SPREAD;
    if (SLOT.compareAndSet(held, i, 0, 1)) return;
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

  private static void pause(int waits) {
    if (waits < 64) {
      Thread.onSpinWait();
    } else if (waits < 128) {
      Thread.yield();
    } else {
      LockSupport.parkNanos(100_000);
    }
  }
}
