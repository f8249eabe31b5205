package kioku.bench.persist;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CyclicBarrier;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * make_persistent with 1 or 2 threads at once (bench/persist/mp_threads_ab.sh): in each round
 * every thread builds a fresh graph, then all store theirs into their own slot of a persistent
 * array at the same moment (a barrier), which makes the graph persistent. {@code disjoint}: each
 * thread's graph is its own list of N {@link Item}s; {@code shared}: each thread's list of N/2
 * Items ends in a list of N/2 Items built once per round and reached by both, so the threads
 * meet each other's grey objects. Only the stores are timed: wall time of a round from the
 * barrier to the last thread's return, the CPU time of the storing threads, and the process's
 * CPU time over the measured rounds (building the graphs, the JVM's GC and compilers included).
 *
 * <p>usage: ConcurrentPersistMain POOL THREADS disjoint|shared N WARMUP ROUNDS; prints one
 * RESULT line: objects made persistent per second of wall time and per second of CPU time.
 */
public final class ConcurrentPersistMain {
  private ConcurrentPersistMain() {}

  /** One slot per thread (a persistent array: stores into it make graphs persistent). */
  static final class Slots {
    @DurableRoot static Object[] slots;
  }

  public static void main(String[] args) throws Exception {
    Path pool = Path.of(args[0]);
    int threads = Integer.parseInt(args[1]);
    boolean shared = args[2].equals("shared");
    int n = Integer.parseInt(args[3]);
    int warmup = Integer.parseInt(args[4]);
    int rounds = Integer.parseInt(args[5]);
    Files.deleteIfExists(pool);
    KiokuPersist.open(pool, "shm");
    Slots.slots = new Object[threads];
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    // Time the storing threads spend blocked or waiting (a lock, a group's end): what shows
    // whether they run at once or one after the other, whatever the machine's load.
    mx.setThreadContentionMonitoringEnabled(true);
    long[] waited = new long[threads];
    long[] waitedSum = new long[1];
    Item[][] graphs = new Item[threads][];
    long[] cpu = new long[threads];
    long[] end = new long[threads];
    CyclicBarrier start = new CyclicBarrier(threads + 1);
    CyclicBarrier done = new CyclicBarrier(threads + 1);
    long[] wallSum = new long[1];
    long[] cpuSum = new long[1];
    Thread[] ts = new Thread[threads];
    Item[] sharedPart = new Item[1];
    for (int t = 0; t < threads; t++) {
      int me = t;
      ts[t] = new Thread(() -> {
        try {
          for (int r = 0; r < warmup + rounds; r++) {
            Item g = shared ? list(n / 2, sharedPart[0], me * n) : list(n, null, me * n);
            start.await();
            java.lang.management.ThreadInfo i0 = mx.getThreadInfo(Thread.currentThread().getId());
            long c0 = mx.getCurrentThreadCpuTime();
            Slots.slots[me] = g;
            cpu[me] = mx.getCurrentThreadCpuTime() - c0;
            java.lang.management.ThreadInfo i1 = mx.getThreadInfo(Thread.currentThread().getId());
            waited[me] = i1.getWaitedTime() + i1.getBlockedTime() - i0.getWaitedTime() - i0.getBlockedTime();
            end[me] = System.nanoTime();
            done.await();
          }
        } catch (Exception e) {
          throw new IllegalStateException(e);
        }
      }, "persist-" + t);
      ts[t].start();
    }
    com.sun.management.OperatingSystemMXBean os =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    long processCpu0 = 0;
    for (int r = 0; r < warmup + rounds; r++) {
      if (r == warmup) processCpu0 = os.getProcessCpuTime();
      if (shared) sharedPart[0] = list(n / 2, null, -n);
      start.await();
      long t0 = System.nanoTime();
      done.await();
      long last = 0;
      long c = 0;
      long wt = 0;
      for (int t = 0; t < threads; t++) {
        last = Math.max(last, end[t]);
        c += cpu[t];
        wt += waited[t];
      }
      if (r >= warmup) {
        wallSum[0] += last - t0;
        cpuSum[0] += c;
        waitedSum[0] += wt;
      }
    }
    double processCpu = (os.getProcessCpuTime() - processCpu0) / 1e9;
    for (Thread t : ts) t.join();
    long objects = (long) rounds * (shared ? (long) threads * (n / 2) + n / 2 : (long) threads * n);
    double wall = wallSum[0] / 1e9;
    double cpuS = cpuSum[0] / 1e9;
    System.out.printf(
        "RESULT threads=%d shape=%s objects=%d wall_s=%.4f cpu_s=%.4f process_cpu_s=%.4f waited_s=%.4f objs_per_wall_s=%.0f objs_per_cpu_s=%.0f gcRuns=%d%n",
        threads, shared ? "shared" : "disjoint", objects, wall, cpuS, processCpu, waitedSum[0] / 1e3, objects / wall, objects / cpuS,
        KiokuPersist.stats().gcRuns());
    KiokuPersist.close();
    Files.deleteIfExists(pool);
  }

  /** A list of n Items (ids from {@code first}) ending in {@code tail}. */
  private static Item list(int n, Item tail, int first) {
    Item head = tail;
    for (int i = n - 1; i >= 0; i--) {
      Item it = new Item();
      it.id = first + i;
      it.count = i & 1023;
      it.price = i * 0.25;
      it.next = head;
      head = it;
    }
    return head;
  }
}
