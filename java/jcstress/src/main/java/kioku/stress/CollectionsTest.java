package kioku.stress;

import static org.openjdk.jcstress.annotations.Expect.ACCEPTABLE;
import static org.openjdk.jcstress.annotations.Expect.FORBIDDEN;

import java.util.ArrayList;
import java.util.HashMap;
import org.openjdk.jcstress.annotations.Actor;
import org.openjdk.jcstress.annotations.Arbiter;
import org.openjdk.jcstress.annotations.Description;
import org.openjdk.jcstress.annotations.JCStressTest;
import org.openjdk.jcstress.annotations.Outcome;
import org.openjdk.jcstress.annotations.State;
import org.openjdk.jcstress.infra.results.L_Result;

/**
 * Persistent JDK collections from two threads: each actor works on its own persistent
 * collection (an ArrayList, a HashMap), both adding the same white element objects, so the
 * two make them persistent concurrently; each also writes a field of an element that the
 * other may be copying. The lists grow (arraycopy into a new array) and the map resizes.
 */
@JCStressTest
@Description("Two actors operate on two different persistent collections (ArrayList, HashMap)"
    + " that share element objects; afterwards both collections and everything they reach must"
    + " have replicas equal to them, and the collections the expected contents.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Contents as expected, replicas agree.")
@Outcome(expect = FORBIDDEN, desc = "A replica differs or is missing, or the contents are wrong.")
@State
public class CollectionsTest {
  final Holder holder = Holder.persistent();
  final ArrayList<Object> list = new ArrayList<>(2);
  final HashMap<Object, Object> map = new HashMap<>(4);
  final Node e1 = new Node(1);
  final Node e2 = new Node(2);
  final Node e3 = new Node(3);
  Node n10;
  Node n11;

  public CollectionsTest() {
    e1.next = e3;
    holder.left = list; // both persistent (and empty) before the actors start
    holder.right = map;
  }

  @Actor
  public void lists() {
    list.add(e1);
    list.add(e2);
    n10 = new Node(10);
    list.add(0, n10); // grows: a new elementData, copied
    list.add(e3);
    list.remove(0);
    list.set(2, e1);
    e2.stamp = 22; // e2 may be being copied by the other actor
    e3.ints = new int[] {3};
  }

  @Actor
  public void maps() {
    map.put("a", e2);
    map.put("b", e1);
    map.put(e3, "c");
    n11 = new Node(11);
    map.put("d", n11); // the 4th entry resizes the table
    map.remove("b");
    map.put("e", e3);
    e1.id = 11; // e1 may be being copied by the other actor
  }

  @Arbiter
  public void check(L_Result r) {
    String c =
        Check.replicas(
            holder.named(new Check.Names())
                .add("list", list).add("map", map).add("e1", e1).add("e2", e2).add("e3", e3)
                .add("n10", n10).add("n11", n11).add("e3.ints", e3.ints),
            holder, e1, e2, e3);
    if (Check.OK.equals(c)
        && !(list.size() == 3 && list.get(0) == e1 && list.get(1) == e2 && list.get(2) == e1
            && map.size() == 4 && map.get("a") == e2 && map.get(e3) == "c" && map.get("e") == e3)) {
      c = "BAD contents: " + list.size() + " " + map.size();
    }
    r.r1 = c;
    holder.release();
  }
}
