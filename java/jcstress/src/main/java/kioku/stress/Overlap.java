package kioku.stress;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Two white graphs that share objects: both reach a shared cycle (with a JDK list, map and
 * array in it), and {@link #b} also reaches into the interior of {@link #a}.
 */
public final class Overlap {
  public final Node a;
  public final Node b;
  private final Node a2;
  private final Node s1;
  private final Node s2;

  public Overlap() {
    s1 = new Node(100);
    s2 = new Node(101);
    s1.next = s2;
    s2.next = s1;
    s1.ints = new int[] {1, 2, 3};
    s1.payload = new HashMap<>(Map.of("k", s2));
    s2.refs = new Object[] {s1, "shared", Integer.valueOf(1000)};
    s2.payload = new ArrayList<>(List.of(s1, "x"));
    a = new Node(1);
    a2 = new Node(2);
    a.next = a2;
    a2.next = s1;
    a2.other = s2;
    a.longs = new long[] {5, 6};
    a.refs = new Object[] {a2, s2, null};
    b = new Node(3);
    b.next = s2;
    b.other = a2;
    b.payload = s1.ints;
    b.refs = new Object[] {s1, a2, b};
    b.name = "b";
  }

  /** Names for the objects of both graphs, for {@link Check}. */
  public Check.Names names() {
    return new Check.Names()
        .add("a", a).add("a2", a2).add("b", b).add("s1", s1).add("s2", s2)
        .add("a.longs", a.longs).add("a.refs", a.refs).add("b.refs", b.refs)
        .add("s1.ints", s1.ints).add("s2.refs", s2.refs)
        .add("s1.payload", s1.payload).add("s2.payload", s2.payload)
        .add("s2.refs[2]", s2.refs[2]);
  }
}
