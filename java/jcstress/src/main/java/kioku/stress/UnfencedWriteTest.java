package kioku.stress;

import static org.openjdk.jcstress.annotations.Expect.ACCEPTABLE;
import static org.openjdk.jcstress.annotations.Expect.FORBIDDEN;

import java.util.concurrent.atomic.AtomicLong;
import org.openjdk.jcstress.annotations.Actor;
import org.openjdk.jcstress.annotations.Arbiter;
import org.openjdk.jcstress.annotations.Description;
import org.openjdk.jcstress.annotations.JCStressTest;
import org.openjdk.jcstress.annotations.Outcome;
import org.openjdk.jcstress.annotations.State;
import org.openjdk.jcstress.infra.results.L_Result;

/**
 * The asymmetric fence: writers that found the fence flag low store without a fence; the
 * copier that raises it brings every thread through a safepoint before it copies, so their
 * stores are visible to its copy or its verify. Only the copier actor makes anything
 * persistent here, and it lowers the flag again after each copy, so every state's race starts
 * with the writer unfenced.
 */
@JCStressTest
@Description("One actor makes a white object persistent, then lowers the writers' fence flag;"
    + " the other writes its primitive fields, array elements and an AtomicLong it holds without"
    + " making anything persistent; afterwards every replica must equal its object.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Replicas agree with every write.")
@Outcome(expect = FORBIDDEN, desc = "A write was lost from a replica.")
@State
public class UnfencedWriteTest {
  final Holder holder = Holder.persistent();
  final Node node = new Node(1);
  final AtomicLong counter = new AtomicLong();

  public UnfencedWriteTest() {
    node.ints = new int[4];
    node.longs = new long[2];
    node.payload = counter;
  }

  @Actor
  public void persist() {
    holder.left = node;
    Fences.lower(); // only this actor makes objects persistent, and it is done
  }

  @Actor
  public void write() {
    node.id = 42;
    node.stamp = 0x0123_4567_89ab_cdefL;
    node.ints[1] = 5;
    node.longs[0] = -1L;
    node.weight = 2.5;
    counter.incrementAndGet();
    node.ints[3] = 6;
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 = Check.replicas(
        holder.named(new Check.Names()).add("node", node).add("node.ints", node.ints)
            .add("node.longs", node.longs).add("counter", counter),
        holder);
    holder.release();
  }
}
