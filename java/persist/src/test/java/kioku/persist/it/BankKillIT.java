package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * kioku.examples.Bank with 2 and 4 threads, SIGKILLed at random moments and started again on
 * the same pool: after every recovery the balances sum to the opening total, the journal length
 * equals the counter, replaying the journal gives the balances, and the counter is at least
 * every transfer a thread acknowledged before the kill. kioku.bankKills sets the kills per
 * thread count (default 12; make soak runs more); KIOKU_SEED or kioku.seed replays a run.
 */
class BankKillIT {
  private static final Pattern ACK = Pattern.compile("ack (\\d+)");
  private static final Pattern RECOVERED = Pattern.compile("recovered counter=(\\d+)");

  private static void killLoop(int threads, int kills, long seed, Path dir) throws Exception {
    Path pool = dir.resolve("bank" + threads + ".pool");
    Path out = dir.resolve("bank" + threads + ".out");
    Path err = dir.resolve("bank" + threads + ".err");
    SplittableRandom rnd = new SplittableRandom(seed);
    // Isolation waits only for real deadlocks here: a group is never committed early because
    // a loaded machine was slow.
    String agent = "pool=" + pool + ",isolation.wait=600000";
    long acknowledged = 0;
    int killed = 0;
    int starts = 0;
    while (killed < kills) {
      if (starts > kills * 3) fail(threads + " threads: only " + killed + " kills in " + starts + " starts");
      Process p = Jvm.start(true, agent, out, err, "kioku.examples.Bank", String.valueOf(threads), "16");
      starts++;
      while (p.isAlive() && !Files.readString(out).contains("recovered")) Thread.sleep(2);
      long delay = rnd.nextLong(400);
      Thread.sleep(delay);
      boolean alive = p.isAlive();
      if (alive) {
        p.destroyForcibly(); // SIGKILL
        p.waitFor();
        killed++;
      }
      String o = Files.readString(out);
      Matcher r = RECOVERED.matcher(o);
      if (o.contains("INCONSISTENT") || !r.find() || (alive && p.exitValue() != 137)) {
        fail(threads + " threads (seed " + seed + ", start " + starts + ", kill after " + delay
            + " ms): exit " + p.exitValue() + "\n" + o + Files.readString(err));
      }
      long recovered = Long.parseLong(r.group(1));
      if (recovered < acknowledged) {
        fail(threads + " threads (seed " + seed + ", start " + starts + "): recovered counter "
            + recovered + " but transfer " + acknowledged + " was acknowledged before the kill");
      }
      Matcher a = ACK.matcher(o);
      while (a.find()) acknowledged = Math.max(acknowledged, Long.parseLong(a.group(1)));
      if (!alive && o.contains("done")) {
        // The bank reached its end (long runs): open a new one.
        Files.delete(pool);
        acknowledged = 0;
      }
    }
    // One more start checks the last kill's state.
    Process last = Jvm.start(true, agent, out, err, "kioku.examples.Bank", "1", "16");
    while (last.isAlive() && !Files.readString(out).contains("recovered")) Thread.sleep(2);
    last.destroyForcibly().waitFor();
    String o = Files.readString(out);
    Matcher r = RECOVERED.matcher(o);
    assertTrue(!o.contains("INCONSISTENT") && r.find(), o + Files.readString(err));
    assertTrue(Long.parseLong(r.group(1)) >= acknowledged, o);
    System.out.println("bank, " + threads + " threads: " + killed + " kills, " + starts + " starts, "
        + acknowledged + " transfers acknowledged, all kept");
  }

  @Test
  void twoAndFourTellersLoseNoAcknowledgedTransfer() throws Exception {
    int kills = Integer.getInteger("kioku.bankKills", 12);
    String s = System.getenv("KIOKU_SEED");
    long seed = s != null ? Long.parseLong(s) : Long.getLong("kioku.seed", System.nanoTime());
    System.out.println("BankKillIT seed " + seed + " (KIOKU_SEED to replay)");
    Path dir = Files.createTempDirectory(Path.of("/dev/shm"), "kioku-bank-");
    try {
      killLoop(2, kills, seed, dir);
      killLoop(4, kills, seed + 1, dir);
    } finally {
      try (var files = Files.list(dir)) {
        for (Path f : (Iterable<Path>) files::iterator) Files.deleteIfExists(f);
      }
      Files.deleteIfExists(dir);
    }
  }
}
