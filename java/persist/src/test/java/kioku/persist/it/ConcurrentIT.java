package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * kioku.examples.Concurrent: AtomicLong, AtomicLongArray, AtomicReference, AtomicBoolean,
 * LongAdder, ConcurrentHashMap (and its key set), ConcurrentLinkedQueue and
 * CopyOnWriteArrayList written by 2 and 4 threads without locks, SIGKILLed at random moments
 * and started again: after every start the store's invariants hold (checked by the program),
 * no id is issued twice across runs, and nothing acknowledged is lost (each thread's step
 * count and the last id issued are at least what it acknowledged). kioku.concurrentKills sets
 * the kills per thread count (default 5).
 */
class ConcurrentIT {
  private static final Pattern ACK = Pattern.compile("ack (\\d+) (\\d+) (\\d+)");
  private static final Pattern RECOVERED = Pattern.compile("recovered ids=(\\d+) entries=\\d+ steps=([\\d,]+)");
  private final Path dir = Files.createTempDirectory(Path.of("/dev/shm"), "kioku-concurrent-");

  ConcurrentIT() throws Exception {}

  @AfterEach
  void clean() throws Exception {
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  private void killLoop(int threads, int kills, long seed) throws Exception {
    Path pool = dir.resolve("concurrent" + threads + ".pool");
    Path out = dir.resolve("out");
    Path err = dir.resolve("err");
    SplittableRandom rnd = new SplittableRandom(seed);
    long[] ackedStep = new long[8];
    long ackedId = 0;
    for (int start = 0; start <= kills; start++) {
      Process p = Jvm.start(true, "pool=" + pool, out, err, "kioku.examples.Concurrent", "run", String.valueOf(threads));
      while (p.isAlive() && !Files.readString(out).contains("recovered")) Thread.sleep(2);
      String head = Files.readString(out);
      Matcher r = RECOVERED.matcher(head);
      if (head.contains("INCONSISTENT") || !r.find()) {
        p.destroyForcibly().waitFor();
        fail(threads + " threads (seed " + seed + ", start " + start + "):\n" + head + Files.readString(err));
      }
      long ids = Long.parseLong(r.group(1));
      String[] steps = r.group(2).split(",");
      if (ids < ackedId) fail("seed " + seed + ": " + ids + " ids issued after recovery, " + ackedId + " acknowledged");
      for (int t = 0; t < threads; t++) {
        if (Long.parseLong(steps[t]) < ackedStep[t]) {
          fail("seed " + seed + ": thread " + t + " at step " + steps[t] + ", acknowledged " + ackedStep[t]);
        }
      }
      if (start == kills) {
        p.destroyForcibly().waitFor();
        break;
      }
      Thread.sleep(rnd.nextLong(300));
      if (!p.isAlive()) fail("ended early: " + Files.readString(out) + Files.readString(err));
      p.destroyForcibly().waitFor(); // SIGKILL
      String o = Files.readString(out);
      if (o.contains("INCONSISTENT")) fail("seed " + seed + ", start " + start + ":\n" + o);
      Matcher a = ACK.matcher(o);
      while (a.find()) {
        int t = Integer.parseInt(a.group(1));
        ackedStep[t] = Math.max(ackedStep[t], Long.parseLong(a.group(2)));
        ackedId = Math.max(ackedId, Long.parseLong(a.group(3)));
      }
    }
    assertTrue(ackedId > 0, "no operation acknowledged");
    System.out.println("concurrent, " + threads + " threads: " + kills + " kills, " + ackedId + " ids acknowledged, all kept");
  }

  @Test
  void lockFreeWritersLoseNothingAcknowledged() throws Exception {
    int kills = Integer.getInteger("kioku.concurrentKills", 5);
    String s = System.getenv("KIOKU_SEED");
    long seed = s != null ? Long.parseLong(s) : Long.getLong("kioku.seed", System.nanoTime());
    System.out.println("ConcurrentIT seed " + seed + " (KIOKU_SEED to replay)");
    killLoop(2, kills, seed);
    killLoop(4, kills, seed + 1);
  }
}
