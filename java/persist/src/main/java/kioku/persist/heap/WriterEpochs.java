package kioku.persist.heap;

import java.util.ArrayList;
import java.util.List;

/**
 * Lets the persistent-heap GC wait until no thread is still writing into a replica it is about
 * to free. A writer of a primitive value runs lock-free: it marks itself busy, reads the
 * replica word, writes the replica and marks itself idle. The GC first clears the words of
 * the objects whose replicas die, then waits until every thread that was busy has been idle
 * once (a grace period), then frees. Busy = an odd sequence number.
 */
final class WriterEpochs {
  static final class State {
    final Thread owner = Thread.currentThread();
    volatile long seq;
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
    State s = local.get();
    s.seq = s.seq + 1; // volatile store: ordered before the replica word is read
    return s;
  }

  static void exit(State s) {
    s.seq = s.seq + 1;
  }

  /** Returns once every writer busy at the call has left its write. */
  void awaitGracePeriod() {
    for (State s : states) {
      long q = s.seq;
      if ((q & 1) == 0) continue;
      while (s.seq == q && s.owner.isAlive()) Thread.onSpinWait();
    }
  }
}
