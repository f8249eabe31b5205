package kioku.examples;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Consumer;
import java.util.function.Supplier;
import kioku.persist.DurableRoot;
import kioku.persist.heap.PersistentHeap;
import kioku.persist.pool.CrashMode;
import kioku.persist.pool.Pool;
import kioku.persist.pool.SimMedium;
import kioku.persist.rt.Barrier;

/**
 * Power cuts at every ordering point (flush or drain) of make_persistent, of stores into
 * persistent objects and collections, and of recovery, on the simulated medium. Runs under the
 * agent (so these classes and the JDK collections are instrumented), in one JVM: for each
 * scenario it counts the operation's ordering points, then for each point n builds a fresh
 * heap, cuts the power at n, runs the operation on, and opens crash images of that moment
 * (drained only, all flushed, and random subsets with torn words and evicted lines). Every
 * image must open and recover to the state before the operation or the state after it.
 *
 * <p>Prints one line per scenario; exits 1 on the first violation.
 */
public class PowerCuts {
  /** The root every scenario uses. */
  public static class Root {
    @DurableRoot public static Object root;
  }

  /** An application object with fields of several kinds. */
  static final class Account {
    String owner;
    long balance;
    int[] history = new int[4];
    Account partner;
    volatile int version;
  }

  record Scenario(String name, Supplier<Object> setup, Consumer<Object> operation) {}

  static String describe(Object o) {
    StringBuilder b = new StringBuilder();
    describe(o, b, new java.util.IdentityHashMap<>());
    return b.toString();
  }

  private static void describe(Object o, StringBuilder b, Map<Object, Integer> seen) {
    if (o == null) {
      b.append("null");
      return;
    }
    Integer id = seen.get(o);
    if (id != null) {
      b.append('@').append(id);
      return;
    }
    if (o instanceof String || o instanceof Number) {
      b.append(o.getClass().getSimpleName()).append(':').append(o);
      return;
    }
    seen.put(o, seen.size());
    if (o instanceof Account a) {
      b.append("Account{").append(a.owner).append(',').append(a.balance).append(',')
          .append(java.util.Arrays.toString(a.history)).append(",v").append(a.version).append(',');
      describe(a.partner, b, seen);
      b.append('}');
    } else if (o instanceof Map<?, ?> m) {
      for (Object k : m.keySet()) if (!m.containsKey(k)) b.append("LOST-KEY:").append(k).append(' ');
      b.append(o.getClass().getSimpleName()).append(m.size()).append('{');
      new TreeMap<Object, Object>(m).forEach((k, v) -> {
        describe(k, b, seen);
        b.append('=');
        describe(v, b, seen);
        b.append(';');
      });
      b.append('}');
    } else if (o instanceof List<?> l) {
      b.append(o.getClass().getSimpleName()).append(l.size()).append('[');
      for (Object e : l) {
        describe(e, b, seen);
        b.append(';');
      }
      b.append(']');
    } else if (o instanceof java.util.Set<?> set && !(o instanceof java.util.EnumSet<?>)) {
      for (Object k : set) if (!set.contains(k)) b.append("LOST-KEY:").append(k).append(' ');
      java.util.TreeSet<String> sorted = new java.util.TreeSet<>();
      for (Object k : set) sorted.add(String.valueOf(k));
      b.append("Set").append(set.size()).append(sorted);
    } else if (o instanceof Object[] arr) {
      b.append("Object[");
      for (Object e : arr) {
        describe(e, b, seen);
        b.append(';');
      }
      b.append(']');
    } else {
      b.append(o);
    }
  }

  static List<Scenario> scenarios() {
    List<Scenario> s = new ArrayList<>();
    s.add(new Scenario("make_persistent of a graph", () -> null, r -> Root.root = graph()));
    s.add(new Scenario("putfield (primitive)", PowerCuts::graph, r -> ((Account) ((Object[]) r)[0]).balance = 77));
    s.add(new Scenario("putfield (reference to a new graph)", PowerCuts::graph, r -> {
      Account a = (Account) ((Object[]) r)[0];
      Account n = new Account();
      n.owner = "new partner";
      n.partner = a;
      a.partner = n;
    }));
    s.add(new Scenario("volatile putfield", PowerCuts::graph, r -> ((Account) ((Object[]) r)[0]).version = 5));
    s.add(new Scenario("array store", PowerCuts::graph, r -> ((Account) ((Object[]) r)[0]).history[2] = -9));
    s.add(new Scenario("System.arraycopy", PowerCuts::graph, r -> {
      Account a = (Account) ((Object[]) r)[0];
      System.arraycopy(new int[] {5, 6, 7}, 0, a.history, 1, 3);
    }));
    s.add(new Scenario("ArrayList.add (grows the array)", PowerCuts::graph, r -> {
      @SuppressWarnings("unchecked")
      ArrayList<Object> l = (ArrayList<Object>) ((Object[]) r)[1];
      l.add("item");
    }));
    s.add(new Scenario("ArrayList.addAll", PowerCuts::graph, r -> {
      @SuppressWarnings("unchecked")
      ArrayList<Object> l = (ArrayList<Object>) ((Object[]) r)[1];
      l.addAll(1, List.of("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"));
    }));
    s.add(new Scenario("KiokuPersist.atomic over several objects", PowerCuts::graph, r -> {
      Account a = (Account) ((Object[]) r)[0];
      kioku.persist.KiokuPersist.atomic(() -> {
        a.balance -= 30;
        a.partner.balance += 30;
        a.history[0] = -30;
        a.partner.history[0] = 30;
      });
    }));
    s.add(new Scenario("HashMap.put (resize)", PowerCuts::graph, r -> {
      @SuppressWarnings("unchecked")
      HashMap<String, Integer> m = (HashMap<String, Integer>) ((Object[]) r)[2];
      m.put("k12", 12); // 13 entries: the table doubles, every node moves
    }));
    s.add(new Scenario("TreeMap.remove (rebalance)", PowerCuts::graph, r -> {
      @SuppressWarnings("unchecked")
      TreeMap<Integer, String> t = (TreeMap<Integer, String>) ((Object[]) r)[3];
      t.remove(3);
    }));
    s.add(new Scenario("LinkedList.removeFirst + addLast, in one atomic block", PowerCuts::graph, r -> {
      @SuppressWarnings("unchecked")
      LinkedList<String> l = (LinkedList<String>) ((Object[]) r)[4];
      kioku.persist.KiokuPersist.atomic(() -> l.addLast(l.removeFirst()));
    }));
    s.add(new Scenario("root replaced", PowerCuts::graph, r -> Root.root = new Object[] {"other"}));
    s.addAll(domainScenarios());
    return s;
  }

  /** A key whose hash changes at every recovery, as an enum's identity hash does across runs. */
  public static final class Shifty implements Comparable<Shifty> {
    static int salt;
    final int id;

    Shifty(int id) {
      this.id = id;
    }

    @Override
    public int hashCode() {
      return id * 31 + salt;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Shifty s && s.id == id;
    }

    @Override
    public int compareTo(Shifty o) {
      return Integer.compare(id, o.id);
    }

    @Override
    public String toString() {
      return "S" + id;
    }
  }

  public enum Day {
    MON,
    TUE,
    WED
  }

  public record Point(int x, java.math.BigDecimal y) {}

  /** The value types and concurrent classes of issue 13's second part, and the recovery fixes. */
  static List<Scenario> domainScenarios() {
    List<Scenario> s = new ArrayList<>();
    s.add(new Scenario("AtomicLong.incrementAndGet", () -> new Object[] {new java.util.concurrent.atomic.AtomicLong(5)},
        r -> ((java.util.concurrent.atomic.AtomicLong) ((Object[]) r)[0]).incrementAndGet()));
    s.add(new Scenario("AtomicReference.compareAndSet", () -> new Object[] {new java.util.concurrent.atomic.AtomicReference<Object>("a")},
        r -> {
          @SuppressWarnings("unchecked")
          var a = (java.util.concurrent.atomic.AtomicReference<Object>) ((Object[]) r)[0];
          a.compareAndSet("a", new Point(3, java.math.BigDecimal.valueOf(314, 2)));
        }));
    s.add(new Scenario("AtomicIntegerArray.getAndAdd", () -> new Object[] {new java.util.concurrent.atomic.AtomicIntegerArray(4)},
        r -> ((java.util.concurrent.atomic.AtomicIntegerArray) ((Object[]) r)[0]).getAndAdd(2, 7)));
    s.add(new Scenario("ConcurrentHashMap.put (new key)", () -> concurrentMap(5),
        r -> concurrentMapOf(r).put("k99", 99)));
    s.add(new Scenario("ConcurrentHashMap.put (resize)", () -> concurrentMap(12),
        r -> concurrentMapOf(r).put("k12", 12)));
    s.add(new Scenario("ConcurrentHashMap.remove", () -> concurrentMap(6),
        r -> concurrentMapOf(r).remove("k3")));
    s.add(new Scenario("ConcurrentLinkedQueue.offer + poll", () -> new Object[] {new java.util.concurrent.ConcurrentLinkedQueue<>(List.of("q1", "q2"))},
        r -> {
          @SuppressWarnings("unchecked")
          var q = (java.util.concurrent.ConcurrentLinkedQueue<Object>) ((Object[]) r)[0];
          kioku.persist.KiokuPersist.atomic(() -> q.offer(q.poll() + "!"));
        }));
    s.add(new Scenario("CopyOnWriteArrayList.add", () -> new Object[] {new java.util.concurrent.CopyOnWriteArrayList<>(List.of("c1"))},
        r -> {
          @SuppressWarnings("unchecked")
          var l = (java.util.concurrent.CopyOnWriteArrayList<Object>) ((Object[]) r)[0];
          l.add(java.time.LocalDate.of(2024, 2, 29));
        }));
    s.add(new Scenario("LongAdder.add", () -> new Object[] {new java.util.concurrent.atomic.LongAdder()},
        r -> ((java.util.concurrent.atomic.LongAdder) ((Object[]) r)[0]).add(3)));
    s.add(new Scenario("EnumMap.put + EnumSet.add", () -> {
          var m = new java.util.EnumMap<Day, String>(Day.class);
          m.put(Day.MON, "m");
          return new Object[] {m, java.util.EnumSet.of(Day.TUE)};
        }, r -> {
          @SuppressWarnings("unchecked")
          var m = (java.util.EnumMap<Day, String>) ((Object[]) r)[0];
          @SuppressWarnings("unchecked")
          var e = (java.util.EnumSet<Day>) ((Object[]) r)[1];
          kioku.persist.KiokuPersist.atomic(() -> {
            m.put(Day.WED, "w");
            e.add(Day.MON);
          });
        }));
    s.add(new Scenario("PriorityQueue.offer (sift up)", () -> new Object[] {new java.util.PriorityQueue<>(List.of(5, 9, 7, 12, 10))},
        r -> {
          @SuppressWarnings("unchecked")
          var q = (java.util.PriorityQueue<Integer>) ((Object[]) r)[0];
          q.offer(1);
        }));
    s.add(new Scenario("values: records, BigDecimal, java.time, UUID, Optional, List.of", () -> new Object[] {new ArrayList<>()},
        r -> {
          @SuppressWarnings("unchecked")
          var l = (ArrayList<Object>) ((Object[]) r)[0];
          l.add(List.of(new Point(1, new java.math.BigDecimal("12.50")), java.util.UUID.nameUUIDFromBytes(new byte[] {1}),
              java.time.ZonedDateTime.of(2024, 5, 6, 7, 8, 9, 0, java.time.ZoneId.of("Europe/Paris")),
              java.util.Optional.of("o"), java.util.Map.of("k", java.math.BigInteger.TEN.pow(30)),
              java.util.Collections.unmodifiableList(new ArrayList<>(List.of("u")))));
        }));
    // Keys that hash differently at every recovery: recovery rebuilds the tables in a section,
    // which the second cut (during recovery) cuts at every ordering point too.
    s.add(new Scenario("HashMap, ConcurrentHashMap and Set.of of keys whose hash changes", PowerCuts::shiftyTables,
        r -> {
          @SuppressWarnings("unchecked")
          var m = (HashMap<Shifty, String>) ((Object[]) r)[0];
          @SuppressWarnings("unchecked")
          var c = (java.util.concurrent.ConcurrentHashMap<Shifty, String>) ((Object[]) r)[1];
          kioku.persist.KiokuPersist.atomic(() -> {
            m.put(new Shifty(7), "seven");
            c.put(new Shifty(8), "eight");
          });
        }));
    return s;
  }

  static Object[] concurrentMap(int n) {
    var m = new java.util.concurrent.ConcurrentHashMap<String, Integer>();
    for (int i = 0; i < n; i++) m.put("k" + i, i);
    return new Object[] {m};
  }

  @SuppressWarnings("unchecked")
  static java.util.concurrent.ConcurrentHashMap<String, Integer> concurrentMapOf(Object r) {
    return (java.util.concurrent.ConcurrentHashMap<String, Integer>) ((Object[]) r)[0];
  }

  static Object[] shiftyTables() {
    var m = new HashMap<Shifty, String>();
    var c = new java.util.concurrent.ConcurrentHashMap<Shifty, String>();
    for (int i = 0; i < 6; i++) {
      m.put(new Shifty(i), "v" + i);
      c.put(new Shifty(i), "w" + i);
    }
    return new Object[] {m, c, java.util.Set.of(new Shifty(1), new Shifty(2), new Shifty(3))};
  }

  static Object[] graph() {
    Account a = new Account();
    a.owner = "alice";
    a.balance = 100;
    Account b = new Account();
    b.owner = "bob";
    b.partner = a;
    a.partner = b;
    ArrayList<Object> list = new ArrayList<>(List.of("x", "y", 3));
    HashMap<String, Integer> map = new HashMap<>();
    for (int i = 0; i < 12; i++) map.put("k" + i, i);
    TreeMap<Integer, String> tree = new TreeMap<>();
    for (int i = 0; i < 10; i++) tree.put(i, "v" + i);
    LinkedList<String> linked = new LinkedList<>(List.of("l1", "l2", "l3"));
    return new Object[] {a, list, map, tree, linked};
  }

  static PersistentHeap.Options options() {
    return new PersistentHeap.Options(256L << 10, 2, 32L << 10);
  }

  static PersistentHeap fresh(SimMedium m) throws Exception {
    PersistentHeap h = PersistentHeap.create(Pool.create(m, PersistentHeap.POOL_KIND), options());
    use(h);
    return h;
  }

  /** Hands the barrier to {@code h} (recovering another heap, or closing it, takes it away). */
  static void use(PersistentHeap h) {
    Barrier.hooks = h;
    Barrier.active = true;
    h.rootsDeclared(Root.class);
  }

  static Object recover(SimMedium m) throws Exception {
    Shifty.salt++; // as if in a new JVM, where identity hashes differ
    PersistentHeap h = PersistentHeap.open(Pool.open(m));
    Object r = h.recover(PowerCuts.class.getClassLoader()).get(Root.class.getName() + "#root");
    h.close();
    return r;
  }

  public static void main(String[] args) throws Exception {
    int seeds = args.length > 0 ? Integer.parseInt(args[0]) : 8;
    long images = 0;
    String only = System.getProperty("kioku.cuts.only"); // a regular expression, to replay some
    for (Scenario sc : scenarios()) {
      if (only != null && !sc.name.matches(only)) continue;
      // The states before and after, and the operation's ordering points.
      SimMedium m = SimMedium.create(0);
      PersistentHeap h = fresh(m);
      Root.root = sc.setup.get();
      String before = describe(recover(SimMedium.fromImage(m.crash(CrashMode.DRAINED_ONLY))));
      use(h);
      long start = m.orderingPoints();
      sc.operation.accept(Root.root);
      long end = m.orderingPoints();
      h.close();
      String after = describe(recover(SimMedium.fromImage(m.crash(CrashMode.DRAINED_ONLY))));
      if (before.equals(after)) fail(sc, "the operation changed nothing durable: " + after);
      for (long n = start; n <= end; n++) {
        SimMedium cut = SimMedium.create(0);
        PersistentHeap hc = fresh(cut);
        Root.root = sc.setup.get();
        use(hc);
        cut.cutPowerAt(n);
        sc.operation.accept(Root.root);
        hc.close(); // its objects stop being persistent: the next heap's must be its own
        List<CrashMode> modes = new ArrayList<>(List.of(CrashMode.DRAINED_ONLY, CrashMode.ALL_FLUSHED));
        for (long seed = 0; seed < seeds; seed++) modes.add(CrashMode.random(seed * 7919 + n, true, true));
        for (CrashMode mode : modes) {
          byte[] image = cut.crash(mode);
          String got;
          try {
            got = describe(recover(SimMedium.fromImage(image)));
          } catch (Exception e) {
            fail(sc, "cut at " + n + " (" + mode + "): recovery failed: " + e);
            return;
          }
          if (!got.equals(before) && !got.equals(after)) {
            fail(sc, "cut at " + n + " (" + mode + "):\n  got    " + got + "\n  before " + before + "\n  after  " + after);
          }
          images++;
          // A second cut, during the recovery of the image with the most pending state (its
          // undo-log rollback writes).
          if (mode != CrashMode.ALL_FLUSHED) continue;
          SimMedium again = SimMedium.fromImage(image);
          long p0 = again.orderingPoints();
          recover(again);
          long p1 = again.orderingPoints();
          for (long k = p0; k < p1; k++) {
            SimMedium twice = SimMedium.fromImage(image);
            twice.cutPowerAt(k);
            recover(twice);
            String g2 = describe(recover(SimMedium.fromImage(twice.crash(CrashMode.random(k, true, true)))));
            if (!g2.equals(before) && !g2.equals(after)) {
              fail(sc, "cut at " + n + ", then during recovery at " + k + ": " + g2);
            }
            images++;
          }
        }
      }
      System.out.println("ok " + sc.name + ": " + (end - start + 1) + " cut points");
    }
    System.out.println("images " + images);
  }

  private static void fail(Scenario sc, String what) {
    System.out.println("FAIL " + sc.name + ": " + what);
    System.exit(1);
  }
}
