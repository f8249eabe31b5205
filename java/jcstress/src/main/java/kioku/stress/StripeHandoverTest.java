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
 * Stores into replicas whose stripes another thread owns: the state's constructor stores into a
 * persistent object and a persistent array first (its thread takes their stripes), then two
 * actors store into both at once, each taking the stripes over with a handshake while the other
 * may be inside a store (and, once the JVM's budget of handshakes is spent, every owned stripe
 * becomes shared in one last handshake while actors store). A taker that did not wait for the
 * owner's store would let two stores update one replica's check words at once: the checks
 * would then not match the contents.
 */
@JCStressTest
@Description("Two actors take over the stripes of replicas a third thread owns while storing into"
    + " them; the replicas and their check words must match the objects.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Replicas and check words match the objects.")
@Outcome(expect = FORBIDDEN, desc = "A replica or its check words differ from the object.")
@State
public class StripeHandoverTest {
  final Holder holder = Holder.persistent();
  final Node node = new Node(1);
  final long[] longs = new long[4];

  public StripeHandoverTest() {
    holder.left = node;
    holder.right = longs;
    node.stamp = 7; // the constructing thread's stores: it owns the stripes now
    longs[3] = 7;
  }

  @Actor
  public void first() {
    node.stamp = 0x1111_2222_3333_4444L;
    longs[0] = 11;
    node.small = 1;
    longs[2] = 33;
  }

  @Actor
  public void second() {
    node.weight = -2.5;
    longs[1] = 22;
    node.mid = 2;
    longs[3] = 66;
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 = Check.replicas(holder.named(new Check.Names()).add("node", node).add("longs", longs), holder);
    holder.release();
  }
}
