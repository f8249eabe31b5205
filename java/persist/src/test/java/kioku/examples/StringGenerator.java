package kioku.examples;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedList;
import java.util.TreeMap;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * The thesis's string generator, with the standard collections: generates strings and keeps
 * them in an ArrayList, a HashMap (string → index), a TreeMap and a LinkedList, all durable.
 * Each collection operation is failure-atomic, and the program updates the collections in a
 * fixed order, so after a crash each holds the first n strings, with n non-increasing along
 * that order and differing by at most one.
 */
public class StringGenerator {
  @DurableRoot static ArrayList<String> list;
  @DurableRoot static HashMap<String, Integer> index;
  @DurableRoot static TreeMap<Integer, String> sorted;
  @DurableRoot static LinkedList<String> recent;

  static String make(int i) {
    StringBuilder b = new StringBuilder("str-").append(i).append('-');
    long x = i * 0x9E3779B97F4A7C15L;
    for (int k = 0; k < 1 + (i % 7); k++) {
      b.append((char) ('a' + (int) ((x >>> (k * 5)) & 15)));
    }
    if (i % 11 == 0) b.append("-ü"); // still Latin-1
    if (i % 13 == 0) b.append('世'); // UTF-16
    return b.toString();
  }

  public static void main(String[] args) {
    if (list == null) list = new ArrayList<>();
    if (index == null) index = new HashMap<>();
    if (sorted == null) sorted = new TreeMap<>();
    if (recent == null) recent = new LinkedList<>();
    String problem = check();
    if (problem != null) {
      System.out.println("INCONSISTENT " + problem);
      System.exit(3);
    }
    System.out.println("recovered " + list.size());
    System.out.flush();
    // "+N": N more strings than recovered.
    int target = args[0].startsWith("+") ? list.size() + Integer.parseInt(args[0].substring(1)) : Integer.parseInt(args[0]);
    // Finish the string a crash interrupted, then go on.
    for (int i = sorted.size(); i < target; i++) {
      String s = make(i);
      if (list.size() == i) list.add(s);
      if (index.size() == i) index.put(s, i);
      if (recent.isEmpty() || !recent.getLast().equals(s)) recent.addLast(s);
      while (recent.size() > 100) recent.removeFirst();
      sorted.put(i, s);
    }
    String end = check();
    System.out.println(end == null ? "done " + list.size() : "INCONSISTENT " + end);
    if (KiokuPersist.isOpen()) KiokuPersist.close();
    System.exit(end == null ? 0 : 3);
  }

  static String check() {
    int n = list.size();
    int m = index.size();
    int t = sorted.size();
    if (!(n >= m && m >= t && n - t <= 1)) {
      return "sizes: list " + n + ", map " + m + ", tree " + t;
    }
    for (int i = 0; i < n; i++) {
      String want = make(i);
      if (!want.equals(list.get(i))) return "list[" + i + "] = " + list.get(i);
      if (i < m && !Integer.valueOf(i).equals(index.get(want))) return "map[" + want + "] = " + index.get(want);
      if (i < t && !want.equals(sorted.get(i))) return "tree[" + i + "] = " + sorted.get(i);
    }
    if (t > 0 && !sorted.firstKey().equals(0)) return "tree starts at " + sorted.firstKey();
    // recent: consecutive strings ending at string t-1 or t (t-1 done, t in progress); at
    // most 100, or 101 between an addLast and its removeFirst.
    int r = recent.size();
    if (r > 101) return "recent has " + r;
    if (r == 0) return t == 0 ? null : "recent is empty after " + t + " strings";
    int last = -1;
    for (int i = Math.max(0, t - 1); i <= Math.min(t, n - 1); i++) {
      if (make(i).equals(recent.getLast())) last = i;
    }
    if (last < 0) return "recent ends with " + recent.getLast() + " after " + t + " strings";
    if (r < Math.min(last + 1, 100)) return "recent has " + r + " strings ending at " + last;
    int i = last;
    for (java.util.Iterator<String> it = recent.descendingIterator(); it.hasNext(); i--) {
      if (!make(i).equals(it.next())) return "recent out of order at " + i;
    }
    return null;
  }
}
