package kioku.bench.persist;

import java.util.HashMap;
import java.util.Random;

/**
 * Target 2 in one JVM (run with the agent by bench.py): builds the same structures as
 * {@link ReadBench}, two copies each, makes one copy persistent, then times the two copies in
 * alternating blocks (the order swapped every round), so both are read by the same compiled
 * code in the same JVM at nearly the same time. Prints one line per measured round:
 * {@code ROUND read=NAME plain=US persistent=US} (µs per pass).
 */
public final class ReadAlternating {
  private ReadAlternating() {}

  static final int WARMUP = 10;
  static final int ROUNDS = 20;
  static final int PASSES = 100; // passes per timed block

  static long sum(int[] a) {
    long s = 0;
    for (int i = 0; i < a.length; i++) s += a[i];
    return s;
  }

  static long traverse(Node n) {
    long s = 0;
    for (; n != null; n = n.next) s += n.value;
    return s;
  }

  static long gets(HashMap<Integer, Integer> m, Integer[] probes) {
    long s = 0;
    for (Integer k : probes) {
      Integer v = m.get(k);
      if (v != null) s += v;
    }
    return s;
  }

  interface Pass {
    long run(boolean persistent);
  }

  static long sink;

  static double block(Pass p, boolean persistent) {
    long t0 = System.nanoTime();
    for (int k = 0; k < PASSES; k++) sink += p.run(persistent);
    return (System.nanoTime() - t0) / 1e3 / PASSES;
  }

  static void measure(String name, Pass p) {
    for (int r = 0; r < WARMUP + ROUNDS; r++) {
      boolean persistentFirst = (r & 1) == 1;
      double a = block(p, persistentFirst);
      double b = block(p, !persistentFirst);
      double plain = persistentFirst ? b : a;
      double persistent = persistentFirst ? a : b;
      if (r >= WARMUP) System.out.println("ROUND read=" + name + " plain=" + plain + " persistent=" + persistent);
    }
  }

  public static void main(String[] args) {
    Pools.open("shm");
    int[] intsPlain = new int[ReadBench.INTS];
    int[] intsPersistent = new int[ReadBench.INTS];
    for (int i = 0; i < ReadBench.INTS; i++) intsPlain[i] = intsPersistent[i] = i * 31 + 7;
    Node listPlain = null;
    Node listPersistent = null;
    for (int i = ReadBench.NODES; i > 0; i--) listPlain = new Node(i, listPlain);
    for (int i = ReadBench.NODES; i > 0; i--) listPersistent = new Node(i, listPersistent);
    HashMap<Integer, Integer> mapPlain = new HashMap<>();
    HashMap<Integer, Integer> mapPersistent = new HashMap<>();
    for (int i = 0; i < ReadBench.KEYS; i++) mapPlain.put(2 * i, i);
    for (int i = 0; i < ReadBench.KEYS; i++) mapPersistent.put(2 * i, i);
    Random r = new Random(9);
    Integer[] probes = new Integer[ReadBench.PROBES];
    for (int i = 0; i < probes.length; i++) probes[i] = r.nextInt(2 * ReadBench.KEYS);
    Roots.ints = intsPersistent;
    Roots.list = listPersistent;
    Roots.map = mapPersistent;
    Pools.printStats("reads-alternating");
    final Node lp = listPlain;
    final Node lq = listPersistent;
    measure("sumIntArray", p -> sum(p ? intsPersistent : intsPlain));
    measure("traverseList", p -> traverse(p ? lq : lp));
    measure("hashMapGet", p -> gets(p ? mapPersistent : mapPlain, probes));
    System.out.println("sink " + sink);
  }
}
