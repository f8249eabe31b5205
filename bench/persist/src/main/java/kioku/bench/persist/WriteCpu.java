package kioku.bench.persist;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * {@link WriteBench}'s stores in one thread, timed by that thread's own CPU time: on a loaded
 * machine JMH's wall-clock average counts the time the thread waited for a core, which swamps a
 * store of tens of nanoseconds. Usage: {@code java -javaagent:AGENT -Dkioku.bench.mode=active
 * -Dkioku.bench.shm=DIR -cp benchmarks.jar kioku.bench.persist.WriteCpu MEDIUM SECS NAME...}
 * (NAME: a WriteBench method, e.g. putInt_persistent). Each runs half of SECS as warm-up, then
 * batches of 100,000 invocations for the other half; prints "name median min batches" in
 * nanoseconds of CPU per store.
 */
public final class WriteCpu {
  private WriteCpu() {}

  private static final int BATCH = 100_000;

  public static void main(String[] args) throws Exception {
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    WriteBench w = new WriteBench();
    w.medium = args[0];
    w.setup();
    long half = (long) (Double.parseDouble(args[1]) * 0.5e9);
    StringBuilder out = new StringBuilder();
    for (int a = 2; a < args.length; a++) {
      Method m = WriteBench.class.getMethod(args[a]);
      long end = System.nanoTime() + half;
      while (System.nanoTime() < end) for (int i = 0; i < 1000; i++) m.invoke(w);
      List<Double> ns = new ArrayList<>();
      end = System.nanoTime() + half;
      while (System.nanoTime() < end || ns.size() < 5) {
        long c0 = mx.getCurrentThreadCpuTime();
        for (int i = 0; i < BATCH; i++) m.invoke(w);
        ns.add((mx.getCurrentThreadCpuTime() - c0) / (double) BATCH / WriteBench.OPS);
      }
      Collections.sort(ns);
      out.append(String.format("%s %.2f %.2f %d%n", args[a], ns.get(ns.size() / 2), ns.get(0), ns.size()));
    }
    System.out.print(out);
  }
}
