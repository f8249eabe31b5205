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

/** Concurrent make_persistent of overlapping graphs through two fields of a persistent object. */
@JCStressTest
@Description("Two actors store two white graphs that share objects into two fields of one"
    + " persistent object at once; afterwards every reachable object must have a replica equal"
    + " to it.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Both graphs fully persistent, replicas agree.")
@Outcome(expect = FORBIDDEN, desc = "A reachable object lacks a replica, or a replica differs.")
@State
public class OverlapFieldsTest {
  final Holder holder = Holder.persistent();
  final Overlap g = new Overlap();

  @Actor
  public void left() {
    holder.left = g.a;
  }

  @Actor
  public void right() {
    holder.right = g.b;
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 = Check.replicas(holder.named(g.names()), holder, g.a, g.b);
    holder.release();
  }
}
