package kioku.stress;

import static org.openjdk.jcstress.annotations.Expect.ACCEPTABLE;
import static org.openjdk.jcstress.annotations.Expect.FORBIDDEN;

import org.openjdk.jcstress.annotations.Actor;
import org.openjdk.jcstress.annotations.Arbiter;
import org.openjdk.jcstress.annotations.Description;
import org.openjdk.jcstress.annotations.JCStressTest;
import org.openjdk.jcstress.annotations.Outcome;
import org.openjdk.jcstress.annotations.State;
import org.openjdk.jcstress.infra.results.L_Result;

/**
 * Volatile stores racing make_persistent: the volatile barrier runs before the store (it
 * locks the object and writes the replica first), so a writer that found the object white
 * stores after the check while the copier may already be copying.
 */
@JCStressTest
@Description("One actor makes a white object with volatile fields persistent while the other"
    + " writes its volatile int, long and reference fields; afterwards the replica must equal"
    + " the object.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Replica equals the object.")
@Outcome(expect = FORBIDDEN, desc = "A volatile store was lost from the replica.")
@State
public class VolatileVsPersistTest {
  final Holder holder = Holder.persistent();
  final VolatileBox box = new VolatileBox();
  Node n7;

  @Actor
  public void persist() {
    holder.right = box;
  }

  @Actor
  public void write() {
    box.vi = 5;
    box.vl = -6L;
    n7 = new Node(7);
    box.vr = n7;
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 = Check.replicas(holder.named(new Check.Names()).add("box", box).add("n7", n7), holder);
    holder.release();
  }
}
