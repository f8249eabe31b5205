package kioku.transparency;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;
import kioku.persist.rt.Barrier;

/**
 * Runs the JUnit console launcher with persistence active: first makes a small graph
 * persistent through a durable root, so that every write barrier in the JVM takes its slow
 * path (a fence and a replica-word or side-table look-up) for the rest of the run, then hands
 * its arguments to the console launcher's {@code main}, as {@link Launch} does. Run it with
 * {@code -javaagent:kioku-persist.jar=pool=PATH} and the console launcher on the class path.
 *
 * <p>While the tests run, a daemon thread keeps writing to the persistent graph (a map put, a
 * list element, an int[] element every few milliseconds, and now and then a list growing and
 * shrinking), so persistent stores and their failure-atomic sections run concurrently with the
 * tests' own barriers. At exit a shutdown hook stops it, writes once more and compares the
 * graph with its replica; it prints {@link #OK} or {@link #BAD} with the differences on
 * standard error.
 */
public final class PersistentLauncher {
  private PersistentLauncher() {}

  static final String OK = "kioku-transparency: persistent root verified";
  static final String BAD = "kioku-transparency: persistent root differs from its replica";
  static final String WRITER_FAILED = "kioku-transparency: the writer thread failed";

  /** The persistent graph: a list holding a map, a string, a box and an int[]. */
  @DurableRoot static Object root;

  private static volatile boolean stop;

  public static void main(String[] args) throws Throwable {
    System.err.println(Launch.probe());
    if (!KiokuPersist.isOpen()) {
      System.err.println("kioku-transparency: no pool is open: run with -javaagent:...=pool=PATH");
      System.exit(3);
    }
    List<Object> list = new ArrayList<>();
    Map<String, Object> map = new HashMap<>();
    int[] counters = {0, 0, 0};
    map.put("tests", "commons-collections4");
    list.add(map);
    list.add("started");
    list.add(42L);
    list.add(counters);
    root = list; // make_persistent: from here on Barrier.active is true
    map.put("launcher", "junit-platform-console");
    if (!Barrier.active) {
      System.err.println("kioku-transparency: persistence did not become active");
      System.exit(3);
    }
    List<String> diffs = KiokuPersist.verify(root);
    if (!diffs.isEmpty()) {
      System.err.println(BAD + " before the tests: " + diffs);
      System.exit(3);
    }
    Thread writer = new Thread(() -> write(list, map, counters), "kioku-transparency-writer");
    writer.setDaemon(true);
    writer.start();
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  stop = true;
                  try {
                    writer.join(10_000);
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                  list.add("finished");
                  map.put("exit", Boolean.TRUE);
                  List<String> d =
                      writer.isAlive()
                          ? List.of("the writer thread did not stop")
                          : KiokuPersist.verify(root);
                  System.err.println(
                      d.isEmpty() ? OK + " after " + counters[0] + " writes" : BAD + ": " + d);
                  System.err.flush();
                },
                "kioku-transparency-verify"));
    Launch.console(args);
  }

  private static void write(List<Object> list, Map<String, Object> map, int[] counters) {
    try {
      for (int n = 1; !stop; n++) {
        map.put("tick", n);
        list.set(2, (long) n);
        counters[0] = n;
        counters[1 + n % 2]++;
        if (n % 50 == 0) {
          for (int i = 0; i < 20; i++) list.add("tick " + n + "." + i);
          while (list.size() > 4) list.remove(list.size() - 1);
        }
        Thread.sleep(5);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (RuntimeException | Error e) {
      System.err.println(WRITER_FAILED + ": " + e);
      e.printStackTrace();
    }
  }
}
