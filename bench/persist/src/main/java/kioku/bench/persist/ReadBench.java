package kioku.bench.persist;

import java.util.HashMap;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;

/**
 * Target 2: reads of persistent objects against identical non-persistent ones. Every fork (agent
 * attached, pool open on /dev/shm) builds both copies of each structure the same way and makes
 * one of them persistent by assigning it to a {@code @DurableRoot}; each benchmark method reads
 * one of them. The *_persistent and *_plain bodies are identical apart from the field they read.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
public class ReadBench {
  static final int INTS = 1 << 20; // 4 MiB
  static final int NODES = 1 << 18;
  static final int KEYS = 1 << 16;
  static final int PROBES = 1 << 14;

  private int[] intsPlain;
  private int[] intsPersistent;
  private Node listPlain;
  private Node listPersistent;
  private HashMap<Integer, Integer> mapPlain;
  private HashMap<Integer, Integer> mapPersistent;
  private Integer[] probes;

  @Setup(Level.Trial)
  public void setup() {
    Pools.open("shm");
    intsPlain = ints();
    intsPersistent = ints();
    listPlain = list();
    listPersistent = list();
    mapPlain = map();
    mapPersistent = map();
    Random r = new Random(9);
    probes = new Integer[PROBES];
    for (int i = 0; i < PROBES; i++) probes[i] = Integer.valueOf(r.nextInt(2 * KEYS)); // half miss
    long before = Pools.persistentObjects();
    Roots.ints = intsPersistent;
    Roots.list = listPersistent;
    Roots.map = mapPersistent;
    long made = Pools.persistentObjects() - before;
    if (made < NODES + 2 * KEYS) throw new IllegalStateException("only " + made + " objects persistent");
    Pools.printStats("reads");
  }

  private static int[] ints() {
    int[] a = new int[INTS];
    for (int i = 0; i < INTS; i++) a[i] = i * 31 + 7;
    return a;
  }

  private static Node list() {
    Node head = null;
    for (int i = NODES; i > 0; i--) head = new Node(i, head);
    return head;
  }

  private static HashMap<Integer, Integer> map() {
    HashMap<Integer, Integer> m = new HashMap<>();
    for (int i = 0; i < KEYS; i++) m.put(2 * i, i); // boxed here: distinct objects per map
    return m;
  }

  @Benchmark
  public long sumIntArray_plain() {
    int[] a = intsPlain;
    long s = 0;
    for (int i = 0; i < a.length; i++) s += a[i];
    return s;
  }

  @Benchmark
  public long sumIntArray_persistent() {
    int[] a = intsPersistent;
    long s = 0;
    for (int i = 0; i < a.length; i++) s += a[i];
    return s;
  }

  @Benchmark
  public long traverseList_plain() {
    long s = 0;
    for (Node n = listPlain; n != null; n = n.next) s += n.value;
    return s;
  }

  @Benchmark
  public long traverseList_persistent() {
    long s = 0;
    for (Node n = listPersistent; n != null; n = n.next) s += n.value;
    return s;
  }

  @Benchmark
  public long hashMapGet_plain() {
    HashMap<Integer, Integer> m = mapPlain;
    long s = 0;
    for (Integer k : probes) {
      Integer v = m.get(k);
      if (v != null) s += v;
    }
    return s;
  }

  @Benchmark
  public long hashMapGet_persistent() {
    HashMap<Integer, Integer> m = mapPersistent;
    long s = 0;
    for (Integer k : probes) {
      Integer v = m.get(k);
      if (v != null) s += v;
    }
    return s;
  }
}
