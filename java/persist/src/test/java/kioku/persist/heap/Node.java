package kioku.persist.heap;

import kioku.persist.rt.Persistent;

/** A class written as the agent would instrument it (replica word and accessors by hand). */
public class Node implements Persistent {
  private transient long $kioku$r;

  int value;
  long big;
  double ratio;
  boolean flag;
  char letter;
  String name;
  Node next;
  int[] numbers;
  Object[] things;
  Color color;
  transient Object notPersisted;

  enum Color {
    RED,
    GREEN
  }

  @Override
  public long $kioku$r() {
    return $kioku$r;
  }

  @Override
  public void $kioku$r(long word) {
    $kioku$r = word;
  }
}
