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
 * An atomic block writes a field under a lock, lets go of it, and throws: its rollback races a
 * second thread that stores into the same field under the lock meanwhile. Whatever the order —
 * the store joins the block (which then commits instead of rolling back), or lands before or
 * after the rollback (whose write to memory it then puts back) — the second store is the last
 * one, in the object and in the replica.
 */
@JCStressTest
@Description("A block's rollback after an exception races a store to the same field by another"
    + " thread; the other thread's value must win in memory and in the replica.")
@Outcome(id = "OK 2", expect = ACCEPTABLE, desc = "The second store stands, replicas match.")
@Outcome(expect = FORBIDDEN, desc = "The second store was undone, or a replica differs.")
@State
public class RollbackRaceTest {
  final Holder holder = Holder.persistent();
  final Node node = new Node(0);
  final Object lock = new Object();

  public RollbackRaceTest() {
    holder.left = node;
  }

  @Actor
  public void failing() {
    try {
      KiokuPersist.atomic(() -> {
        synchronized (lock) {
          node.id = 1;
        }
        throw new IllegalStateException("roll back");
      });
    } catch (IllegalStateException expected) {
      // rolled back, or committed with the other store's section
    }
  }

  @Actor
  public void storing() {
    synchronized (lock) {
      node.id = 2;
    }
  }

  @Arbiter
  public void check(L_Result r) {
    String c = Check.replicas(holder.named(new Check.Names()).add("node", node), holder);
    r.r1 = Check.OK.equals(c) ? "OK " + node.id : c;
    holder.release();
  }
}
