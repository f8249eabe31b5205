package kioku.bench.persist;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * The cost of one small make_persistent (a graph of two {@link Item}s stored into a persistent
 * array), one thread, no barrier between stores: what a program storing new small objects into
 * persistent collections pays per store. usage: SmallPersistMain POOL N REPS; prints one RESULT
 * line per repetition after the first (warm-up): CPU and wall nanoseconds per store.
 */
public final class SmallPersistMain {
  private SmallPersistMain() {}

  static final class Slot {
    @DurableRoot static Object[] slot;
  }

  public static void main(String[] args) throws Exception {
    Path pool = Path.of(args[0]);
    int n = Integer.parseInt(args[1]);
    int reps = Integer.parseInt(args[2]);
    Files.deleteIfExists(pool);
    KiokuPersist.open(pool, "shm");
    Slot.slot = new Object[1];
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    for (int rep = 0; rep <= reps; rep++) {
      long c0 = mx.getCurrentThreadCpuTime();
      long t0 = System.nanoTime();
      for (int i = 0; i < n; i++) {
        Item x = new Item();
        x.id = i;
        x.next = new Item();
        Slot.slot[0] = x;
      }
      long cpu = mx.getCurrentThreadCpuTime() - c0;
      long wall = System.nanoTime() - t0;
      if (rep > 0) {
        System.out.printf("RESULT small_persist cpu_ns=%.0f wall_ns=%.0f gcRuns=%d%n", cpu / (double) n,
            wall / (double) n, KiokuPersist.stats().gcRuns());
      }
    }
    KiokuPersist.close();
    Files.deleteIfExists(pool);
  }
}
