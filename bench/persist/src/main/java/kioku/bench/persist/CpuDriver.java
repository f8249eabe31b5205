package kioku.bench.persist;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The {@link Workloads} in one thread, timed by that thread's own CPU time: for a machine whose
 * load makes wall-clock figures the run queue's (cpu_compare.sh runs it in interleaved JVMs).
 * Each workload named on the command line runs for half of {@code -Dsecs} (default 12) as
 * warm-up, then for the other half measured; prints "name median min count" per workload, in
 * milliseconds of CPU per operation.
 */
public final class CpuDriver {
  private CpuDriver() {}

  public static void main(String[] args) throws Exception {
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    Workloads w = new Workloads();
    w.setup();
    long half = (long) (Double.parseDouble(System.getProperty("secs", "12")) * 0.5e9);
    StringBuilder out = new StringBuilder();
    for (String name : args) {
      Method m = Workloads.class.getMethod(name);
      long end = System.nanoTime() + half;
      while (System.nanoTime() < end) m.invoke(w);
      List<Double> ms = new ArrayList<>();
      end = System.nanoTime() + half;
      while (System.nanoTime() < end || ms.size() < 5) {
        long c0 = mx.getCurrentThreadCpuTime();
        m.invoke(w);
        ms.add((mx.getCurrentThreadCpuTime() - c0) / 1e6);
      }
      Collections.sort(ms);
      out.append(String.format("%s %.3f %.3f %d%n", name, ms.get(ms.size() / 2), ms.get(0), ms.size()));
    }
    System.out.print(out); // after all of them: nothing printed while measuring
  }
}
