package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * The thesis's validation: the prime generator and the string generator, SIGKILLed at random
 * moments (during start-up, recovery and work) and started again on the same pool, hundreds
 * of times; every start checks that what it recovered is a state the program could have been
 * in, and the last run goes to the end and checks everything. kioku.kills sets the number of
 * kills per program (default 20, so 40 in all, about four per program during start-up and
 * recovery; make soak runs 15,000 each, the thesis's 30,000); KIOKU_SEED or kioku.seed replays
 * a run.
 */
class KillIT {
  record Outcome(int kills, int duringStartup, int starts, String last) {}

  /** A target the kill runs never reach; the last run adds a few more and finishes. */
  private static final String FOREVER = "100000000";

  private static Outcome killLoop(String main, int kills, long seed, Path dir) throws Exception {
    Path pool = dir.resolve(main.substring(main.lastIndexOf('.') + 1) + ".pool");
    Path out = dir.resolve(pool.getFileName() + ".out");
    Path err = dir.resolve(pool.getFileName() + ".err");
    SplittableRandom rnd = new SplittableRandom(seed);
    int killed = 0;
    int starts = 0;
    int duringStartup = 0;
    long startupMs = 300;
    while (killed < kills) {
      if (starts > kills * 2) fail(main + ": only " + killed + " kills in " + starts + " starts");
      long t0 = System.nanoTime();
      Process p = Jvm.start(true, "pool=" + pool, out, err, main, FOREVER);
      starts++;
      // One kill in five lands anywhere in start-up and recovery; the others while it works.
      boolean early = rnd.nextInt(5) == 0;
      long delay;
      if (early) {
        delay = rnd.nextLong(startupMs + 1);
        Thread.sleep(delay);
      } else {
        while (p.isAlive() && !Files.readString(out).contains("recovered")) Thread.sleep(2);
        startupMs = (System.nanoTime() - t0) / 1_000_000;
        delay = rnd.nextLong(60);
        Thread.sleep(delay);
      }
      if (p.isAlive()) {
        p.destroyForcibly(); // SIGKILL
        p.waitFor();
        killed++;
        if (early) duringStartup++;
      }
      String o = Files.readString(out);
      if (o.contains("INCONSISTENT") || p.exitValue() != 137) {
        fail(main + " (seed " + seed + ", start " + starts + ", kill after " + delay + " ms"
            + (early ? " from start" : " of work") + "): exit " + p.exitValue() + "\n" + o
            + Files.readString(err));
      }
    }
    Process last = Jvm.start("pool=" + pool, out, err, main, "+2000");
    int status = Jvm.run(last, 600);
    String o = Files.readString(out);
    assertEquals(0, status, main + " final run (seed " + seed + "):\n" + o + Files.readString(err));
    assertTrue(o.contains("done "), o);
    return new Outcome(killed, duringStartup, starts, o.strip().replace('\n', ' '));
  }

  @Test
  void bothGeneratorsSurviveHundredsOfSigkills() throws Exception {
    int kills = Integer.getInteger("kioku.kills", 20);
    String s = System.getenv("KIOKU_SEED");
    long seed = s != null ? Long.parseLong(s) : Long.getLong("kioku.seed", System.nanoTime());
    System.out.println("KillIT seed " + seed + " (KIOKU_SEED to replay)");
    Path dir = Files.createTempDirectory(Path.of("/dev/shm"), "kioku-kill-");
    try {
      CompletableFuture<Outcome> primes =
          CompletableFuture.supplyAsync(() -> run("kioku.examples.PrimeGenerator", kills, seed, dir));
      Outcome strings = killLoop("kioku.examples.StringGenerator", kills, seed + 1, dir);
      Outcome p = primes.get();
      System.out.println("primes: " + p + "; strings: " + strings);
      // The work went on across the kills: the last run recovered what the killed ones did.
      assertTrue(recovered(p.last) > 0, p.last);
      assertTrue(recovered(strings.last) > 0, strings.last);
    } finally {
      try (var files = Files.list(dir)) {
        for (Path f : (Iterable<Path>) files::iterator) Files.deleteIfExists(f);
      }
      Files.deleteIfExists(dir);
    }
  }

  private static int recovered(String output) {
    java.util.regex.Matcher m = java.util.regex.Pattern.compile("recovered (\\d+)").matcher(output);
    return m.find() ? Integer.parseInt(m.group(1)) : -1;
  }

  private static Outcome run(String main, int kills, long seed, Path dir) {
    try {
      return killLoop(main, kills, seed, dir);
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }
}
