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
 * A store outside any block into a word an open atomic block owns (the block let go of the
 * lock and is still running): the store becomes a section of its own, joins the block's group
 * and returns once both commit. Afterwards every replica and check word equals the object, and
 * the count has both increments.
 */
@JCStressTest
@Description("An atomic block increments a persistent counter under a lock it releases before"
    + " ending; another actor increments it outside any block; replicas must match, count = 2.")
@Outcome(id = "OK 2", expect = ACCEPTABLE, desc = "Both increments, replicas match.")
@Outcome(expect = FORBIDDEN, desc = "An increment lost, or a replica differs.")
@State
public class PlainIntoOwnedTest {
  final Holder holder = Holder.persistent();
  final Node node = new Node(0);
  final Object lock = new Object();

  public PlainIntoOwnedTest() {
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
    synchronized (lock) {
      node.id++;
    }
  }

  @Arbiter
  public void check(L_Result r) {
    String c = Check.replicas(holder.named(new Check.Names()).add("node", node), holder);
    r.r1 = Check.OK.equals(c) ? "OK " + node.id : c;
    holder.release();
  }
}
