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
 * putfield racing replication: the writer's store lands before, during or after the copier
 * copies the object; the barrier after the store (fence, then the replica word) and the
 * copier's verify pass must together leave the replica equal to the object.
 */
@JCStressTest
@Description("One actor makes a white graph persistent (a putfield into a persistent object)"
    + " while the other writes primitive and reference fields and array elements of objects in"
    + " that graph; afterwards every replica must equal its object.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Graph persistent, replicas agree with every write.")
@Outcome(expect = FORBIDDEN, desc = "A write was lost from a replica, or an object lacks one.")
@State
public class PutfieldRaceTest {
  final Holder holder = Holder.persistent();
  final Node root = new Node(1);
  final Node mid = new Node(2);
  final Node leaf = new Node(3);
  Node n4;
  Node n5;
  int[] pair;

  public PutfieldRaceTest() {
    root.next = mid;
    mid.next = leaf;
    leaf.other = root;
    root.ints = new int[4];
    root.refs = new Object[3];
    leaf.longs = new long[2];
  }

  @Actor
  public void persist() {
    holder.left = root;
  }

  @Actor
  public void write() {
    mid.id = 42;
    leaf.stamp = 0x0123_4567_89ab_cdefL;
    mid.weight = 2.5;
    leaf.ratio = 0.75f;
    mid.flag = true;
    leaf.tag = 'k';
    mid.small = -3;
    leaf.mid = 1234;
    mid.name = "written";
    n4 = new Node(4);
    leaf.other = n4;
    pair = new int[] {7, 8};
    mid.payload = pair;
    root.ints[2] = 33;
    n5 = new Node(5);
    root.refs[1] = n5;
    leaf.longs[1] = -1L;
    root.id = 9;
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 =
        Check.replicas(
            holder.named(new Check.Names())
                .add("root", root).add("mid", mid).add("leaf", leaf).add("n4", n4).add("n5", n5)
                .add("pair", pair).add("root.ints", root.ints).add("root.refs", root.refs)
                .add("leaf.longs", leaf.longs),
            holder);
    holder.release();
    Fences.lower();
  }
}
