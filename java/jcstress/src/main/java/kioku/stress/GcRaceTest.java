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
 * The persistent heap's GC racing make_persistent and stores. Earlier states' graphs are
 * garbage by now (their arbiters released them), so each collection turns objects white and
 * frees replicas while the other actor makes a graph persistent and writes fields of
 * persistent objects. (The GC otherwise runs only when the heap is nearly full, which the
 * short runs never reach.)
 */
@JCStressTest
@Description("One actor makes a white graph persistent and then writes it, while the other"
    + " writes fields of an already persistent graph and runs the persistent heap's GC;"
    + " afterwards every reachable object must have a replica equal to it.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Replicas agree; the GC took nothing reachable.")
@Outcome(expect = FORBIDDEN, desc = "A reachable object lost its replica, or a replica differs.")
@State
public class GcRaceTest {
  final Holder holder = Holder.persistent();
  final Node fresh = new Node(1);
  final Node old = new Node(2);

  public GcRaceTest() {
    fresh.next = new Node(3);
    fresh.ints = new int[2];
    old.next = new Node(4);
    holder.right = old; // persistent before the actors start
  }

  @Actor
  public void persist() {
    holder.left = fresh;
    fresh.next.id = 30;
    fresh.ints[1] = 31;
  }

  @Actor
  public void collect() {
    old.stamp = 40;
    KiokuPersist.gc();
    old.next.stamp = 41;
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 =
        Check.replicas(
            holder.named(new Check.Names())
                .add("fresh", fresh).add("fresh.next", fresh.next).add("fresh.ints", fresh.ints)
                .add("old", old).add("old.next", old.next),
            holder);
    holder.release();
  }
}
