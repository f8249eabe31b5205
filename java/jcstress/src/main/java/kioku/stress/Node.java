package kioku.stress;

/** A graph node with a field of every kind the barriers distinguish. */
public final class Node {
  int id;
  long stamp;
  double weight;
  float ratio;
  boolean flag;
  char tag;
  byte small;
  short mid;
  String name;
  Node next;
  Node other;
  Object payload;
  int[] ints;
  long[] longs;
  Object[] refs;

  public Node(int id) {
    this.id = id;
    this.weight = id / 4.0;
  }
}
