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
 * Concurrent make_persistent of overlapping graphs through two durable roots. The roots are
 * shared by all states, so a later state's actors replace this state's graphs; their replicas
 * stay (words set) until the persistent heap's GC runs. The arbiter checks this state's graphs
 * when no GC ran since the state was made, and always what the roots hold now (jcstress runs
 * arbiters only while no actor runs, so the roots are still).
 */
@JCStressTest
@Description("Two actors assign two white graphs that share objects to two @DurableRoot"
    + " statics at once; afterwards every reachable object must have a replica equal to it.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Both graphs and both roots' graphs persistent, replicas agree.")
@Outcome(id = "OK after GC", expect = ACCEPTABLE,
    desc = "A GC ran since the state was made (this state's graphs may be unreachable and"
        + " collected): the roots' current graphs are persistent and agree.")
@Outcome(expect = FORBIDDEN, desc = "A reachable object lacks a replica, or a replica differs.")
@State
public class OverlapRootsTest {
  final long gcRuns = Durable.gcRuns();
  final Overlap g = new Overlap();

  @Actor
  public void left() {
    Durable.rootA = g.a;
  }

  @Actor
  public void right() {
    Durable.rootB = g.b;
  }

  @Arbiter
  public void check(L_Result r) {
    String roots = Check.replicas(g.names(), Durable.rootA, Durable.rootB);
    if (Durable.gcRuns() != gcRuns) {
      r.r1 = Check.OK.equals(roots) ? "OK after GC" : roots;
    } else {
      String mine = Check.replicas(g.names(), g.a, g.b);
      r.r1 = Check.OK.equals(mine) ? roots : mine;
    }
  }
}
