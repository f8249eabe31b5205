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
 * kioku.examples.SharedGraphs: two threads making graphs that reach each other persistent at
 * once (concurrent make_persistent, joined groups), SIGKILLed at random moments and started
 * again: every start opens the heap (whose checks refuse a replica referenced before it was
 * durable), finds every chain reachable whole, and each thread's slot at least at the step it
 * acknowledged. kioku.sharedGraphKills sets the kills (default 6).
 */
class SharedGraphsKillIT {
  private static final Pattern ACK = Pattern.compile("ack (\\d+) (\\d+)");
  private static final Pattern RECOVERED = Pattern.compile("recovered steps=([\\d,]+)");
  private final Path dir = Files.createTempDirectory(Path.of("/dev/shm"), "kioku-shared-graphs-");

  SharedGraphsKillIT() throws Exception {}

  @AfterEach
  void clean() throws Exception {
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  @Test
  void graphsThatReachEachOtherSurviveSigkills() throws Exception {
    int kills = Integer.getInteger("kioku.sharedGraphKills", 6);
    String s = System.getenv("KIOKU_SEED");
    long seed = s != null ? Long.parseLong(s) : Long.getLong("kioku.seed", System.nanoTime());
    System.out.println("SharedGraphsKillIT seed " + seed + " (KIOKU_SEED to replay)");
    Path pool = dir.resolve("graphs.pool");
    Path out = dir.resolve("out");
    Path err = dir.resolve("err");
    SplittableRandom rnd = new SplittableRandom(seed);
    long[] acked = new long[8];
    long maxAcked = 0;
    for (int start = 0; start <= kills; start++) {
      Process p = Jvm.start(true, "pool=" + pool, out, err, "kioku.examples.SharedGraphs", "run", "2");
      while (p.isAlive() && !Files.readString(out).contains("recovered")) Thread.sleep(2);
      String head = Files.readString(out);
      Matcher r = RECOVERED.matcher(head);
      if (head.contains("INCONSISTENT") || !r.find()) {
        p.destroyForcibly().waitFor();
        fail("seed " + seed + ", start " + start + ":\n" + head + Files.readString(err));
      }
      String[] steps = r.group(1).split(",");
      for (int t = 0; t < 2; t++) {
        if (Long.parseLong(steps[t]) < acked[t]) {
          fail("seed " + seed + ": thread " + t + " recovered at step " + steps[t] + ", acknowledged " + acked[t]);
        }
      }
      if (start == kills) {
        p.destroyForcibly().waitFor();
        break;
      }
      Thread.sleep(50 + rnd.nextLong(300));
      if (!p.isAlive()) fail("ended early: " + Files.readString(out) + Files.readString(err));
      p.destroyForcibly().waitFor(); // SIGKILL
      Matcher a = ACK.matcher(Files.readString(out));
      while (a.find()) {
        int t = Integer.parseInt(a.group(1));
        acked[t] = Math.max(acked[t], Long.parseLong(a.group(2)));
        maxAcked = Math.max(maxAcked, acked[t]);
      }
    }
    assertTrue(maxAcked > 0, "no step acknowledged");
    System.out.println("shared graphs: " + kills + " kills, steps acknowledged " + acked[0] + ", " + acked[1] + ", all kept");
  }
}
