package kioku.stress;

import static org.openjdk.jcstress.annotations.Expect.ACCEPTABLE;
import static org.openjdk.jcstress.annotations.Expect.FORBIDDEN;

import java.util.Arrays;
import org.openjdk.jcstress.annotations.Actor;
import org.openjdk.jcstress.annotations.Arbiter;
import org.openjdk.jcstress.annotations.Description;
import org.openjdk.jcstress.annotations.JCStressTest;
import org.openjdk.jcstress.annotations.Outcome;
import org.openjdk.jcstress.annotations.State;
import org.openjdk.jcstress.infra.results.L_Result;

/**
 * Array stores racing replication: element stores, System.arraycopy and Arrays.fill into
 * arrays of a graph that the other actor makes persistent by an element store into a
 * persistent array.
 */
@JCStressTest
@Description("One actor makes a white graph persistent (an aastore into a persistent array)"
    + " while the other stores array elements, copies into the graph's arrays with"
    + " System.arraycopy and fills one with Arrays.fill; afterwards every replica must equal its"
    + " object.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Graph persistent, replicas agree with every store.")
@Outcome(expect = FORBIDDEN, desc = "A store was lost from a replica, or an object lacks one.")
@State
public class ArrayStoreRaceTest {
  final Holder holder = Holder.persistent();
  final Node g = new Node(1);
  final int[] src = {10, 11, 12, 13};
  final Object[] refSrc = {new Node(20), "s"};
  Node n21;

  public ArrayStoreRaceTest() {
    g.ints = new int[8];
    g.longs = new long[4];
    g.refs = new Object[4];
    g.payload = new byte[3];
  }

  @Actor
  public void persist() {
    holder.slots[2] = g;
  }

  @Actor
  public void store() {
    g.ints[3] = 9;
    System.arraycopy(src, 0, g.ints, 4, 4);
    n21 = new Node(21);
    g.refs[2] = n21;
    System.arraycopy(refSrc, 0, g.refs, 0, 2);
    Arrays.fill(g.longs, 1, 3, 77L);
    ((byte[]) g.payload)[1] = (byte) 0xee;
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 =
        Check.replicas(
            holder.named(new Check.Names())
                .add("g", g).add("g.ints", g.ints).add("g.longs", g.longs).add("g.refs", g.refs)
                .add("g.payload", g.payload).add("n20", refSrc[0]).add("n21", n21),
            holder);
    holder.release();
    Fences.lower();
  }
}
