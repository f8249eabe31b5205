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
 * Concurrent make_persistent of overlapping graphs through element stores (aastore) into a
 * persistent array, while one actor also links the two graphs further.
 */
@JCStressTest
@Description("Two actors store two white graphs that share objects into two slots of a"
    + " persistent Object[] at once, one of them also linking a new object into the shared part;"
    + " afterwards every reachable object must have a replica equal to it.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Both graphs fully persistent, replicas agree.")
@Outcome(expect = FORBIDDEN, desc = "A reachable object lacks a replica, or a replica differs.")
@State
public class OverlapSlotsTest {
  final Holder holder = Holder.persistent();
  final Overlap g = new Overlap();
  Node n7;

  @Actor
  public void first() {
    holder.slots[0] = g.a;
  }

  @Actor
  public void second() {
    holder.slots[1] = g.b;
    n7 = new Node(7);
    g.b.other.other = n7; // a2, shared with a: persistent by now, or being copied
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 = Check.replicas(holder.named(g.names()).add("n7", n7), holder, g.a, g.b);
    holder.release();
  }
}
