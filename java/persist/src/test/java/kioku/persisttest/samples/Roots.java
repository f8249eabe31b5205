package kioku.persisttest.samples;

import java.util.ArrayList;
import java.util.List;
import kioku.persist.DurableRoot;

/** Durable roots assigned by a static initializer. */
public class Roots {
  @DurableRoot public static List<String> list;
  public static List<String> notRoot;

  static {
    list = new ArrayList<>();
    notRoot = new ArrayList<>();
    list.add("first");
  }

  public static void replace(List<String> l) {
    list = l;
  }
}
