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
 * Lock-free primitive stores of two threads into one replica: different fields of one object,
 * and different bytes of one 8-byte word of a byte array. Each store also updates the
 * replica's two check words; afterwards the checks must match the contents (verify compares
 * them too), or a later open would call the replica damaged.
 *
 * <p>The constructor stores into both replicas first, so that the thread that made the state
 * owns their stripes (heap.ReplicaLocks) and the actors take them over with a handshake while
 * the other actor may be inside a store (or, once the JVM's budget of handshakes is spent,
 * find them shared, or see every owned stripe made shared in one last handshake while they
 * store). A taker that did not wait for the owner's store would let two stores update one
 * replica's checks at once.
 */
@JCStressTest
@Description("Two actors store into different fields of one persistent object and different"
    + " bytes of one word of a persistent byte[]; the replicas and their check words must match.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Replicas and check words match the objects.")
@Outcome(expect = FORBIDDEN, desc = "A replica or its check words differ from the object.")
@State
public class CheckWordsRaceTest {
  final Holder holder = Holder.persistent();
  final Node node = new Node(1);
  final byte[] bytes = new byte[8];

  public CheckWordsRaceTest() {
    holder.left = node;
    holder.right = bytes;
    node.id = 7; // this thread's stores: it owns the replicas' stripes now
    bytes[7] = 7;
  }

  @Actor
  public void first() {
    node.stamp = 0x1111_2222_3333_4444L;
    bytes[1] = 11;
    node.small = 1;
    bytes[3] = 33;
  }

  @Actor
  public void second() {
    node.weight = -2.5;
    bytes[2] = 22;
    node.mid = 2;
    bytes[6] = 66;
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 = Check.replicas(holder.named(new Check.Names()).add("node", node).add("bytes", bytes), holder);
    holder.release();
  }
}
