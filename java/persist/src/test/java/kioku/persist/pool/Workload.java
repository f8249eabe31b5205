package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A commit workload on the simulator for power-cut tests. Each epoch k adds a section of 1 to 3
 * pages (zeroing reused space), fills and persists it, from epoch 3 on removes the section of
 * epoch k-2 (so later sections reuse its space), and commits roots {k, sections}. Remembers
 * what every epoch must look like and which ordering points each commit spanned.
 */
final class Workload {
  static final long PAGE = 4096;

  /** Per epoch: section name → {length, content seed}. */
  final List<Map<String, long[]>> models = new ArrayList<>();
  /** Per commit k (index k-1): ordering points {before, after} of {@code commit}. */
  final List<long[]> commitSpans = new ArrayList<>();

  /** A fresh pool on a fresh simulator (epoch 0). */
  static Pool freshPool(SimMedium sim) throws PoolException {
    return Pool.create(sim, "kioku.test");
  }

  static Workload run(Pool pool, SimMedium sim, int epochs) throws PoolException {
    Workload w = new Workload();
    Map<String, long[]> model = new TreeMap<>();
    w.models.add(new TreeMap<>(model));
    for (int k = 1; k <= epochs; k++) {
      String name = "d" + k;
      long len = PAGE * (1 + k % 3);
      long seed = 1000 + k;
      Section s = pool.addSection(name, len, k);
      byte[] b = new byte[(int) len];
      for (int i = 0; i < b.length; i++) {
        b[i] = TestSupport.fill(seed, i);
      }
      pool.medium().put(s.offset(), b, 0, b.length);
      pool.medium().persist(s.offset(), len);
      model.put(name, new long[] {len, seed});
      if (k >= 3) {
        pool.removeSection("d" + (k - 2));
        model.remove("d" + (k - 2));
      }
      long before = sim.orderingPoints();
      pool.commit(new long[] {k, model.size()});
      w.commitSpans.add(new long[] {before, sim.orderingPoints()});
      w.models.add(new TreeMap<>(model));
    }
    return w;
  }

  /** The epochs a cut at ordering point {@code p} may leave: {lowest, highest}. */
  long[] allowed(long p) {
    long done = commitSpans.stream().filter(s -> s[1] <= p).count();
    boolean inProgress = commitSpans.stream().anyMatch(s -> s[0] <= p && p < s[1]);
    return new long[] {done, inProgress ? done + 1 : done};
  }

  /** Checks a recovered pool against the model of its epoch; returns the epoch. */
  long verify(Pool pool, String what) {
    long e = pool.epoch();
    assertTrue(e >= 0 && e < models.size(), what + ": epoch " + e + " was never committed");
    Map<String, long[]> model = models.get((int) e);
    if (e > 0) {
      assertArrayEquals(new long[] {e, model.size()}, pool.roots(), what + ": roots");
    } else {
      assertArrayEquals(new long[0], pool.roots(), what + ": roots");
    }
    assertEquals(model.keySet(), new java.util.TreeSet<>(pool.sections().stream()
        .map(Section::name).toList()), what + ": sections of epoch " + e);
    for (Map.Entry<String, long[]> m : model.entrySet()) {
      Section s = pool.section(m.getKey()).orElseThrow();
      assertEquals(m.getValue()[0], s.length(), what + ": length of " + s.name());
      byte[] b = new byte[(int) s.length()];
      pool.medium().get(s.offset(), b, 0, b.length);
      for (int i = 0; i < b.length; i++) {
        if (b[i] != TestSupport.fill(m.getValue()[1], i)) {
          throw new AssertionError(what + ": epoch " + e + ": " + s.name() + " byte " + i);
        }
      }
    }
    return e;
  }
}
