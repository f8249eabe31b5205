package kioku.stress;

import java.util.HashMap;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * The durable roots of the stress tests. Test states register their persistent holders in
 * {@link #registry}, which keeps them reachable (so the persistent heap's GC cannot take their
 * replicas) until their arbiter has checked them and released them.
 */
public final class Durable {
  private Durable() {}

  static {
    StressPool.open(); // before this class's roots are declared, at the end of its initializer
  }

  @DurableRoot static HashMap<Long, Object> registry = new HashMap<>();

  /** Two roots that actors assign concurrently (OverlapRootsTest). */
  @DurableRoot static Object rootA;

  @DurableRoot static Object rootB;

  private static long nextId;

  /** Makes {@code o} (and what it reaches) persistent; returns the id to release it by. */
  public static synchronized long register(Object o) {
    long id = ++nextId;
    registry.put(id, o);
    return id;
  }

  public static synchronized void release(long id) {
    registry.remove(id);
  }

  /** How many times the persistent heap's GC has run (it may clear unreachable replicas). */
  public static long gcRuns() {
    return KiokuPersist.stats().gcRuns();
  }
}
