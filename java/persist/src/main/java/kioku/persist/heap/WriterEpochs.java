package kioku.persist.heap;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayList;
import java.util.List;

/**
 * Lets the persistent-heap GC wait until no thread is still writing into a replica it is about
 * to free. A writer of a primitive value runs lock-free: it marks itself busy, reads the
 * replica word, writes the replica and marks itself idle. The GC first clears the words of
 * the objects whose replicas die, then waits until every thread that was busy has been idle
 * once (a grace period), then frees. Busy = an odd sequence number.
 *
 * <p>The writer's "busy" store and its read of the replica word form a Dekker pair with the
 * GC's clearing of the word and its read of the writer's number, which needs a StoreLoad fence
 * on both sides. The writer's side is every durable store, the GC's is rare: so the writer only
 * keeps the compiler from moving the read above the store (no instruction on x86), and
 * {@link #awaitGracePeriod} brings every thread through a safepoint ({@link Safepoint#force})
 * before it reads the numbers (an asymmetric Dekker, as {@link WriterFences}). A writer that read
 * the old word before its safepoint had made its busy store before it too, so the GC sees it
 * busy; one that reads after its safepoint sees the word cleared. Two volatile stores (a full
 * fence each on x86) were a third of a durable store's time on shm.
 */
final class WriterEpochs {
  private static final VarHandle SEQ;

  static {
    try {
      SEQ = MethodHandles.lookup().findVarHandle(State.class, "seq", long.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  static final class State {
    final Thread owner = Thread.currentThread();
    /** Written by its owner only, with release stores; read by the GC after a safepoint. */
    long seq;
  }

  private final ThreadLocal<State> local = ThreadLocal.withInitial(this::register);
  private volatile List<State> states = new ArrayList<>();

  private synchronized State register() {
    List<State> next = new ArrayList<>();
    for (State s : states) if (s.owner.isAlive()) next.add(s);
    State s = new State();
    next.add(s);
    states = next;
    return s;
  }

  State enter() {
    return enter(local.get());
  }

  /** {@link #enter()} with the thread's state kept in its section object (no lookup). */
  State enter(Sections.Section mine) {
    State s = mine.epoch;
    if (s == null) mine.epoch = s = local.get();
    return enter(s);
  }

  static State enter(State s) {
    SEQ.setRelease(s, s.seq + 1);
    // The replica word is read after this. HotSpot's compilers move no memory access across a
    // fence (the barrier relies on the same for its read of Barrier.active); the CPU's
    // StoreLoad order is the GC's safepoint's business.
    VarHandle.acquireFence();
    return s;
  }

  static void exit(State s) {
    SEQ.setRelease(s, s.seq + 1);
  }

  /** Returns once every writer busy at the call has left its write. */
  void awaitGracePeriod() {
    VarHandle.fullFence(); // the cleared words, before the safepoint
    Safepoint.force();
    for (State s : states) {
      long q = (long) SEQ.getAcquire(s);
      if ((q & 1) == 0) continue;
      while ((long) SEQ.getAcquire(s) == q && s.owner.isAlive()) Thread.onSpinWait();
    }
  }
}
