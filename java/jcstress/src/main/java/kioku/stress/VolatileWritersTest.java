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
 * Two writers of the same volatile fields of a persistent object. The runtime takes the
 * object's lock, writes the replica, then the field: whichever write is last in memory is
 * also last in the replica. The outcome names the winner of each field (1 or 2).
 */
@JCStressTest
@Description("Two actors write the same volatile int, long, double and reference fields of a"
    + " persistent object; afterwards the replica must equal the final value of each.")
@Outcome(id = "OK .*", expect = ACCEPTABLE,
    desc = "Replica equals the final values; the digits say which actor's write was last for"
        + " the int, long, double and reference field.")
@Outcome(expect = FORBIDDEN, desc = "The replica holds another value than the object.")
@State
public class VolatileWritersTest {
  final VolatileBox box = new VolatileBox();
  final Holder holder = Holder.persistent();
  final Node one = new Node(1);
  final Node two = new Node(2);

  public VolatileWritersTest() {
    holder.left = box; // persistent before the actors start
  }

  @Actor
  public void first() {
    box.vi = 1;
    box.vl = 0x1111_1111_1111_1111L;
    box.vd = 1.0;
    box.vr = one;
  }

  @Actor
  public void second() {
    box.vi = 2;
    box.vl = 0x2222_2222_2222_2222L;
    box.vd = 2.0;
    box.vr = two;
  }

  @Arbiter
  public void check(L_Result r) {
    String c = Check.replicas(holder.named(new Check.Names()).add("box", box).add("one", one).add("two", two), holder);
    r.r1 =
        Check.OK.equals(c)
            ? "OK " + box.vi + (box.vl == 0x1111_1111_1111_1111L ? 1 : 2) + (int) box.vd + (box.vr == one ? 1 : 2)
            : c;
    holder.release();
  }
}
