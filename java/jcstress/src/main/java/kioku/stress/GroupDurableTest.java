package kioku.stress;

import static org.openjdk.jcstress.annotations.Expect.ACCEPTABLE;
import static org.openjdk.jcstress.annotations.Expect.FORBIDDEN;

import org.openjdk.jcstress.annotations.Actor;
import org.openjdk.jcstress.annotations.Arbiter;
import org.openjdk.jcstress.annotations.Description;
import org.openjdk.jcstress.annotations.JCStressTest;
import org.openjdk.jcstress.annotations.Outcome;
import org.openjdk.jcstress.annotations.State;
import org.openjdk.jcstress.infra.results.LL_Result;

/**
 * Concurrent make_persistent of two graphs that reach each other in opposite orders (a's graph
 * leads to b's head, b's to a's): whichever thread meets the other's grey objects joins its
 * group. Each actor checks, the moment its store returns, that everything its graph reaches
 * has a replica equal to it with check words that match: a store must not return before the
 * other member's replicas are durable. (Their grey bits may still be clearing then.)
 */
@JCStressTest
@Description("Two actors store two white graphs that reach each other into two fields of one"
    + " persistent object at once; each verifies its whole graph, the other's part included, as"
    + " soon as its own store returns.")
@Outcome(id = "OK, OK", expect = ACCEPTABLE, desc = "Each saw its whole graph durable on return.")
@Outcome(expect = FORBIDDEN, desc = "A store returned before its group's replicas were durable.")
@State
public class GroupDurableTest {
  final Holder holder = Holder.persistent();
  final Node a = new Node(1);
  final Node b = new Node(2);

  public GroupDurableTest() {
    Node a2 = new Node(3);
    Node a3 = new Node(4);
    Node b2 = new Node(5);
    Node b3 = new Node(6);
    a.next = a2;
    a2.next = a3;
    a3.next = b; // a's graph reaches b's head
    a2.refs = new Object[] {a3, "a", new long[] {1, 2}};
    b.next = b2;
    b2.next = b3;
    b3.next = a; // and b's reaches a's
    b2.refs = new Object[] {b3, "b", new int[] {3}};
  }

  @Actor
  public void left(LL_Result r) {
    holder.left = a;
    r.r1 = Check.replicas(a);
  }

  @Actor
  public void right(LL_Result r) {
    holder.right = b;
    r.r2 = Check.replicas(b);
  }

  @Arbiter
  public void check(LL_Result r) {
    holder.release();
  }
}
