package kioku.stress;

import static org.openjdk.jcstress.annotations.Expect.ACCEPTABLE;
import static org.openjdk.jcstress.annotations.Expect.FORBIDDEN;

import kioku.persist.KiokuPersist;
import org.openjdk.jcstress.annotations.Actor;
import org.openjdk.jcstress.annotations.Arbiter;
import org.openjdk.jcstress.annotations.Description;
import org.openjdk.jcstress.annotations.JCStressTest;
import org.openjdk.jcstress.annotations.Outcome;
import org.openjdk.jcstress.annotations.State;
import org.openjdk.jcstress.infra.results.L_Result;

/**
 * Atomic blocks that let go of their lock before they end, overlapping on the same persistent
 * data (issue 13's lost count): the second writer joins the first's group, logs nothing for the
 * words it owns, and ends when both have. Afterwards every replica and check word equals the
 * object, and the count has both increments.
 */
@JCStressTest
@Description("Two atomic blocks increment a persistent counter under a lock they release before"
    + " ending; replicas must match, count = 2.")
@Outcome(id = "OK 2", expect = ACCEPTABLE, desc = "Both increments, replicas match.")
@Outcome(expect = FORBIDDEN, desc = "An increment lost, or a replica differs.")
@State
public class AtomicOverlapTest {
  final Holder holder = Holder.persistent();
  final Node node = new Node(0);
  final Object lock = new Object();

  public AtomicOverlapTest() {
    holder.left = node;
  }

  @Actor
  public void first() {
    KiokuPersist.atomic(() -> {
      synchronized (lock) {
        node.id++;
      }
      node.stamp = 1; // after the lock: the block is still open while others write
    });
  }

  @Actor
  public void second() {
    KiokuPersist.atomic(() -> {
      synchronized (lock) {
        node.id++;
      }
      node.ratio = 2;
    });
  }

  @Arbiter
  public void check(L_Result r) {
    String c = Check.replicas(holder.named(new Check.Names()).add("node", node), holder);
    r.r1 = Check.OK.equals(c) ? "OK " + node.id : c;
    holder.release();
  }
}
