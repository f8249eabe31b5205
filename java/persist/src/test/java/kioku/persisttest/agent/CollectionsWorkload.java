package kioku.persisttest.agent;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.LinkedList;
import java.util.List;
import java.util.ListIterator;
import java.util.Map;
import java.util.Objects;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.TreeSet;
import kioku.persist.DurableRoot;

/**
 * Exercises the retransformed JDK collections and instrumented application code heavily and
 * prints a checksum, which must be the same with and without the agent. With {@code --report}
 * it also prints what the agent instrumented (only valid with the agent).
 */
public final class CollectionsWorkload {
  @DurableRoot static Map<String, List<Integer>> root;

  private long sum = 17;

  private void mix(long v) {
    sum = sum * 1_000_003L + v;
  }

  private void mix(Object o) {
    mix(Objects.hashCode(o));
  }

  /** An application object graph: fields, arrays, volatile, clone, inner class. */
  static class Node implements Cloneable, Comparable<Node> {
    int key;
    volatile long stamp;
    double weight;
    Node next;
    char[] tag = {'n', '0'};

    Node(int key) {
      this.key = key;
      this.weight = key / 3.0;
    }

    @Override
    public Node clone() {
      try {
        Node n = (Node) super.clone();
        n.tag = tag.clone();
        return n;
      } catch (CloneNotSupportedException e) {
        throw new AssertionError(e);
      }
    }

    @Override
    public int compareTo(Node o) {
      return Integer.compare(key, o.key);
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Node n && n.key == key;
    }

    @Override
    public int hashCode() {
      return key % 7; // many collisions: HashMap treeifies
    }
  }

  /** Persistent-shaped, but Thread's own code writes Thread's fields without barriers. */
  static class Job extends Thread {
    int runs;
  }

  /** Keys with equal hash codes and no ordering (HashMap tree bins by identity tie-break). */
  record Collider(int id) {
    @Override
    public int hashCode() {
      return 42;
    }
  }

  public static void main(String[] args) {
    CollectionsWorkload w = new CollectionsWorkload();
    int rounds = args.length > 0 && args[0].matches("\\d+") ? Integer.parseInt(args[0]) : 3;
    for (int r = 0; r < rounds; r++) w.round(new SplittableRandom(1234 + r));
    System.out.println("checksum " + Long.toHexString(w.sum));
    if (Arrays.asList(args).contains("--report")) Report.print();
  }

  private void round(SplittableRandom rnd) {
    arrayLists(rnd);
    linkedLists(rnd);
    deques(rnd);
    hashMaps(rnd);
    treeMaps(rnd);
    sets(rnd);
    sorting(rnd);
    appObjects(rnd);
  }

  private void arrayLists(SplittableRandom rnd) {
    ArrayList<Integer> a = new ArrayList<>();
    for (int i = 0; i < 5000; i++) a.add(rnd.nextInt(1000));
    a.add(0, -1);
    a.addAll(10, List.of(7, 8, 9));
    a.removeIf(x -> x % 11 == 0);
    a.replaceAll(x -> x * 3);
    a.subList(100, 200).clear();
    a.subList(5, 50).sort(Comparator.reverseOrder());
    for (ListIterator<Integer> it = a.listIterator(); it.hasNext(); ) {
      int v = it.next();
      if (v % 5 == 0) it.set(v + 1);
      if (v % 13 == 0) it.remove();
      if (v % 17 == 0) it.add(v);
    }
    a.sort(null);
    @SuppressWarnings("unchecked")
    ArrayList<Integer> copy = (ArrayList<Integer>) a.clone();
    copy.set(0, 12345);
    Collections.reverse(copy);
    Collections.shuffle(copy, new java.util.Random(rnd.nextLong()));
    Collections.swap(copy, 1, 2);
    Integer[] arr = a.toArray(new Integer[0]);
    Object[] big = a.toArray(new Integer[a.size() + 10]);
    mix(a);
    mix(copy);
    mix(Arrays.hashCode(arr));
    mix(big.length);
    a.trimToSize();
    a.ensureCapacity(20000);
    a.retainAll(new HashSet<>(copy.subList(0, copy.size() / 2)));
    mix(a);
    List<Integer> fixed = Arrays.asList(arr);
    Collections.sort(fixed, Comparator.reverseOrder());
    fixed.set(0, 1);
    mix(fixed);
    Collections.fill(copy, 3);
    mix(copy);
  }

  private void linkedLists(SplittableRandom rnd) {
    LinkedList<String> l = new LinkedList<>();
    for (int i = 0; i < 2000; i++) {
      if (rnd.nextBoolean()) l.addFirst("f" + i);
      else l.addLast("l" + i);
    }
    l.removeIf(s -> s.endsWith("3"));
    l.add(500, "mid");
    l.remove(10);
    for (Iterator<String> it = l.descendingIterator(); it.hasNext(); ) {
      if (it.next().length() > 4) it.remove();
    }
    ListIterator<String> it = l.listIterator(l.size() / 2);
    while (it.hasPrevious()) {
      String s = it.previous();
      if (s.hashCode() % 3 == 0) it.set(s + "!");
    }
    @SuppressWarnings("unchecked")
    LinkedList<String> c = (LinkedList<String>) l.clone();
    c.pollFirst();
    c.offerLast("end");
    Collections.sort(c);
    mix(l);
    mix(c);
    mix(l.indexOf("mid"));
  }

  private void deques(SplittableRandom rnd) {
    ArrayDeque<Integer> d = new ArrayDeque<>(4);
    for (int i = 0; i < 3000; i++) {
      switch (rnd.nextInt(4)) {
        case 0 -> d.addFirst(i);
        case 1 -> d.addLast(i);
        case 2 -> d.pollFirst();
        default -> d.pollLast();
      }
    }
    d.removeIf(x -> x % 7 == 0);
    d.removeFirstOccurrence(100);
    ArrayDeque<Integer> c = d.clone();
    c.push(-5);
    mix(Arrays.toString(d.toArray()));
    mix(Arrays.toString(c.toArray()));
    long s = 0;
    for (Iterator<Integer> it = d.descendingIterator(); it.hasNext(); ) s += it.next();
    mix(s);
  }

  private void hashMaps(SplittableRandom rnd) {
    HashMap<Object, Integer> m = new HashMap<>();
    for (int i = 0; i < 4000; i++) m.put("k" + rnd.nextInt(3000), i);
    for (int i = 0; i < 200; i++) m.put(new Collider(i), i); // tree bin
    for (int i = 0; i < 100; i += 3) m.remove(new Collider(i)); // untreeify eventually
    m.merge("k1", 5, Integer::sum);
    m.compute("k2", (k, v) -> v == null ? 1 : v * 2);
    m.computeIfAbsent("new", k -> 77);
    m.computeIfPresent("k3", (k, v) -> null);
    m.putIfAbsent("k4", 4);
    m.replaceAll((k, v) -> v + 1);
    m.entrySet().removeIf(e -> e.getValue() % 9 == 0);
    m.keySet().removeIf(k -> k.hashCode() % 10 == 0);
    m.values().removeIf(v -> v % 8 == 0);
    for (Map.Entry<Object, Integer> e : m.entrySet()) e.setValue(e.getValue() ^ 1);
    @SuppressWarnings("unchecked")
    HashMap<Object, Integer> c = (HashMap<Object, Integer>) m.clone();
    c.put("cloned", 1);
    mix(new TreeMap<>(stringKeys(m)));
    mix(m.size());
    mix(c.size());

    LinkedHashMap<Integer, Integer> lru = new LinkedHashMap<>(16, 0.75f, true) {
      @Override
      protected boolean removeEldestEntry(Map.Entry<Integer, Integer> eldest) {
        return size() > 100;
      }
    };
    for (int i = 0; i < 1000; i++) {
      lru.put(rnd.nextInt(300), i);
      lru.get(rnd.nextInt(300));
    }
    mix(lru.toString());
    root = new HashMap<>();
    root.put("a", new ArrayList<>(List.of(1, 2, 3)));
    root.get("a").add(4);
    mix(root);
  }

  private static Map<String, Integer> stringKeys(Map<Object, Integer> m) {
    Map<String, Integer> out = new HashMap<>();
    m.forEach((k, v) -> out.put(String.valueOf(k), v));
    return out;
  }

  private void treeMaps(SplittableRandom rnd) {
    TreeMap<Integer, String> t = new TreeMap<>();
    for (int i = 0; i < 3000; i++) t.put(rnd.nextInt(5000), "v" + i);
    t.headMap(100).clear();
    t.tailMap(4900, true).replaceAll((k, v) -> v + "t");
    t.subMap(1000, 2000).entrySet().removeIf(e -> e.getKey() % 3 == 0);
    t.descendingMap().pollFirstEntry();
    t.pollLastEntry();
    t.merge(2500, "m", String::concat);
    t.computeIfAbsent(-1, k -> "neg");
    for (Map.Entry<Integer, String> e : t.entrySet()) {
      if (e.getKey() % 10 == 0) e.setValue("ten");
    }
    t.navigableKeySet().removeIf(k -> k % 17 == 0);
    @SuppressWarnings("unchecked")
    TreeMap<Integer, String> c = (TreeMap<Integer, String>) t.clone();
    c.put(99999, "x");
    mix(t);
    mix(c.lastKey());
    mix(t.floorKey(2500));
    mix(t.ceilingEntry(1234));
  }

  private void sets(SplittableRandom rnd) {
    HashSet<Integer> h = new HashSet<>();
    LinkedHashSet<Integer> lh = new LinkedHashSet<>();
    TreeSet<Node> ts = new TreeSet<>();
    for (int i = 0; i < 2000; i++) {
      int v = rnd.nextInt(1500);
      h.add(v);
      lh.add(v);
      ts.add(new Node(v));
    }
    h.removeIf(x -> x % 4 == 0);
    lh.retainAll(h);
    ts.headSet(new Node(300)).clear();
    ts.pollFirst();
    @SuppressWarnings("unchecked")
    HashSet<Integer> hc = (HashSet<Integer>) h.clone();
    hc.add(-1);
    @SuppressWarnings("unchecked")
    TreeSet<Node> tc = (TreeSet<Node>) ts.clone();
    tc.add(new Node(-3));
    mix(new TreeSet<>(h));
    mix(lh.toString());
    mix(ts.size() * 31 + tc.first().key);
    mix(hc.size());
  }

  private void sorting(SplittableRandom rnd) {
    int[] ints = rnd.ints(20000, -1000, 1000).toArray();
    long[] longs = rnd.longs(3000).toArray();
    double[] doubles = rnd.doubles(3000).toArray();
    char[] chars = new char[5000];
    short[] shorts = new short[5000];
    byte[] bytes = new byte[5000];
    float[] floats = new float[300];
    for (int i = 0; i < chars.length; i++) {
      chars[i] = (char) rnd.nextInt(65536);
      shorts[i] = (short) rnd.nextInt();
      bytes[i] = (byte) rnd.nextInt();
    }
    for (int i = 0; i < floats.length; i++) floats[i] = (float) rnd.nextGaussian();
    Arrays.sort(ints);
    Arrays.sort(longs, 10, 2000);
    Arrays.sort(doubles);
    Arrays.sort(chars);
    Arrays.sort(shorts);
    Arrays.sort(bytes);
    Arrays.sort(floats);
    int[] par = rnd.ints(100000).toArray();
    Arrays.parallelSort(par);
    String[] strs = new String[3000];
    for (int i = 0; i < strs.length; i++) strs[i] = Integer.toString(rnd.nextInt(), 36);
    Arrays.sort(strs); // ComparableTimSort
    Integer[] boxed = new Integer[3000];
    for (int i = 0; i < boxed.length; i++) boxed[i] = rnd.nextInt(100);
    Arrays.sort(boxed, Comparator.reverseOrder()); // TimSort
    Integer[] pboxed = Arrays.copyOf(boxed, boxed.length);
    Arrays.parallelSort(pboxed);
    Arrays.fill(longs, 0, 5, 7L);
    Arrays.setAll(doubles, i -> doubles[i] * 2);
    int[] copy = Arrays.copyOfRange(ints, 5, 500);
    System.arraycopy(ints, 0, copy, 10, 100);
    mix(Arrays.hashCode(ints));
    mix(Arrays.hashCode(longs));
    mix(Arrays.hashCode(doubles));
    mix(Arrays.hashCode(chars));
    mix(Arrays.hashCode(shorts));
    mix(Arrays.hashCode(bytes));
    mix(Arrays.hashCode(floats));
    mix(Arrays.hashCode(par));
    mix(Arrays.hashCode(strs));
    mix(Arrays.hashCode(boxed));
    mix(Arrays.hashCode(pboxed));
    mix(Arrays.hashCode(copy));
    List<Integer> list = new ArrayList<>(Arrays.asList(boxed));
    Collections.sort(list);
    mix(Collections.binarySearch(list, 50));
    Collections.rotate(list, 7);
    mix(list);
  }

  private void appObjects(SplittableRandom rnd) {
    Node head = null;
    for (int i = 0; i < 500; i++) {
      Node n = new Node(rnd.nextInt(1000));
      n.next = head;
      n.stamp = i;
      n.tag[1] = (char) ('0' + i % 10);
      head = n;
    }
    Node[] arr = new Node[500];
    int k = 0;
    for (Node n = head; n != null; n = n.next) arr[k++] = n.clone();
    Arrays.sort(arr);
    long s = 0;
    for (Node n : arr) s = s * 31 + n.key + n.stamp + (long) (n.weight * 10) + n.tag[1];
    mix(s);
    HashMap<Node, Integer> byNode = new HashMap<>();
    for (Node n : arr) byNode.merge(n, 1, Integer::sum);
    mix(byNode.size());
  }
}
