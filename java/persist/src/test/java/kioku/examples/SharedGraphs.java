package kioku.examples;

import java.util.concurrent.atomic.AtomicReferenceArray;
import kioku.persist.DurableRoot;

/**
 * Threads making graphs persistent at once, graphs that reach each other, run under the agent
 * and SIGKILLed (SharedGraphsKillIT). Each thread, for each step: builds a chain of {@link
 * #LINKS} links (its number, the step, each link's index), points the chain's head at the
 * other thread's newest chain (which that thread may be making persistent at this moment, or
 * not yet), stores the chain into its slot of a persistent array — a make_persistent that may
 * meet the other thread's grey objects and join its group, or the other its — then prints
 * "ack T STEP". Before the next step it clears its previous head's link to the other chain (so
 * the graphs do not keep every old chain reachable).
 *
 * <p>Invariants checked at every start: every chain a slot reaches, and every chain those
 * reach, is whole (its links, in order, all of one thread and one step). The heap's open has
 * already checked every reachable replica's check words: a reference published before its
 * replica was durable would be refused there. Modes: {@code run THREADS}, {@code check}.
 * "INCONSISTENT ..." and exit 3 on a violation.
 */
public class SharedGraphs {
  static final int LINKS = 24;
  static final int THREADS_MAX = 8;

  public static final class Link {
    int owner;
    long step;
    int index;
    Link next;
    Link peer;
  }

  @DurableRoot static Link[] heads;

  /** Each thread's newest chain from before it is stored: the other thread links to it. */
  static final AtomicReferenceArray<Link> newest = new AtomicReferenceArray<>(THREADS_MAX);

  public static void main(String[] args) throws Exception {
    if (heads == null) heads = new Link[THREADS_MAX];
    String why = check(heads);
    if (why != null) {
      System.out.println("INCONSISTENT " + why);
      System.out.flush();
      System.exit(3);
    }
    StringBuilder steps = new StringBuilder();
    for (int t = 0; t < THREADS_MAX; t++) {
      steps.append(t == 0 ? "" : ",").append(heads[t] == null ? 0 : heads[t].step);
    }
    System.out.println("recovered steps=" + steps);
    System.out.flush();
    if (args[0].equals("check")) return;
    int threads = Integer.parseInt(args[1]);
    Thread[] ts = new Thread[threads];
    for (int t = 0; t < threads; t++) {
      int me = t;
      ts[t] = new Thread(() -> work(me, threads));
      ts[t].start();
    }
    for (Thread t : ts) t.join();
  }

  private static void work(int me, int threads) {
    Link[] h = heads;
    for (long step = h[me] == null ? 1 : h[me].step + 1; ; step++) {
      Link head = null;
      for (int i = LINKS - 1; i >= 0; i--) {
        Link l = new Link();
        l.owner = me;
        l.step = step;
        l.index = i;
        l.next = head;
        head = l;
      }
      head.peer = newest.get((me + 1) % threads);
      newest.set(me, head);
      Link previous = h[me];
      h[me] = head; // make_persistent of the chain and whatever of the other's it reaches
      if (previous != null) previous.peer = null;
      System.out.println("ack " + me + " " + step);
    }
  }

  /** Null if every chain the slots reach is whole. */
  static String check(Link[] slots) {
    if (slots.length != THREADS_MAX) return "slots " + slots.length;
    for (int t = 0; t < slots.length; t++) {
      Link h = slots[t];
      if (h == null) continue;
      String why = whole(h);
      if (why != null) return "slot " + t + ": " + why;
      if (h.owner != t) return "slot " + t + " holds thread " + h.owner + "'s chain";
      for (Link p = h.peer, seen = null; p != null && p != seen; seen = h, p = p.peer) {
        why = whole(p);
        if (why != null) return "slot " + t + ", linked chain: " + why;
        if (p.peer == h) break;
      }
    }
    return null;
  }

  private static String whole(Link h) {
    Link l = h;
    for (int i = 0; i < LINKS; i++) {
      if (l == null) return "chain of " + h.owner + "/" + h.step + " ends at " + i;
      if (l.owner != h.owner || l.step != h.step || l.index != i) {
        return "link " + i + " of " + h.owner + "/" + h.step + " is " + l.owner + "/" + l.step + "/" + l.index;
      }
      l = l.next;
    }
    return l == null ? null : "chain of " + h.owner + "/" + h.step + " longer than " + LINKS;
  }
}
