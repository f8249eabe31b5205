package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * Simulated power cuts of whole programs (the thesis validated RBP with 50): the prime
 * generator and the two-teller bank run under the agent on the {@code sim} medium, whose pool
 * file is the image a power cut leaves ({@code sim.cutAt=N}: the power goes at the program's
 * N-th flush or fence, with torn words and spontaneously written-back lines, and the JVM
 * stops). Each start recovers the previous cut's image and checks it (the programs exit 3 on
 * an inconsistent state); the bank also checks that no transfer a teller saw acknowledged
 * before the cut is missing. Each cut point is drawn from the ordering points of a whole start
 * (recovery and the program's work, the same in every start), so that every start cuts
 * however many points a run has. kioku.programCuts sets the cuts per program (default 5; make soak
 * runs 30 each).
 */
class ProgramPowerCutIT {
  private static final Pattern ACK = Pattern.compile("ack (\\d+)");
  private static final Pattern RECOVERED = Pattern.compile("recovered (?:counter=)?(\\d+)");

  private record Program(String name, String main, String[] args) {}

  private static void cutLoop(Program prog, int cuts, long seed, Path dir) throws Exception {
    Path pool = dir.resolve(prog.name + ".pool");
    Path out = dir.resolve(prog.name + ".out");
    Path err = dir.resolve(prog.name + ".err");
    SplittableRandom rnd = new SplittableRandom(seed);
    long acknowledged = 0;
    int cut = 0;
    int starts = 0;
    // Isolation waits only for real deadlocks: a group committed early because a loaded
    // machine was slow is durable in two parts, which a cut between shows (as BankKillIT).
    String agent = "pool=" + pool + ",medium=sim,isolation.wait=600000";
    // The first start creates the pool; the second recovers it: both run to their end, and
    // the second counts the ordering points of a start (recovery and the program's work).
    acknowledged = checkedStart(prog, agent, seed, starts++, acknowledged, out, err);
    acknowledged = checkedStart(prog, agent, seed, starts++, acknowledged, out, err);
    long points = Long.parseLong(Files.readString(Path.of(pool + ".points")).strip());
    StringBuilder drawn = new StringBuilder();
    while (cut < cuts) {
      // Every later start is cut at a point drawn from the points of a whole start, which do
      // the same work (two tellers may reach a few points fewer, so a start can still end
      // uncut now and then: its count is then taken as the next one's).
      if (starts > 2 + cuts * 2) {
        fail(prog.name + ": only " + cut + " cuts in " + starts + " starts (cut at/of points: "
            + drawn + ")");
      }
      long n = 1 + rnd.nextLong(Math.max(1, points));
      drawn.append(' ').append(n).append('/').append(points);
      String cutAgent = agent + ",sim.cutAt=" + n + ",sim.mode=random:" + rnd.nextLong(1 << 30);
      Process p = Jvm.start(true, cutAgent, out, err, prog.main, prog.args);
      int status = Jvm.run(p, 600);
      starts++;
      String o = Files.readString(out);
      Matcher r = RECOVERED.matcher(o);
      boolean recoveredLine = r.find();
      // A cut may land in start-up or recovery itself (exit 86 before "recovered"): the next
      // start recovers that image.
      if ((status != 0 && status != 86) || o.contains("INCONSISTENT") || (status == 0 && !recoveredLine)) {
        fail(prog.name + " (seed " + seed + ", start " + starts + ", cut at " + n + " of " + points
            + "): exit " + status + "\n" + o + Files.readString(err));
      }
      if (status == 86) {
        cut++;
      } else {
        points = Long.parseLong(Files.readString(Path.of(pool + ".points")).strip());
      }
      if (!recoveredLine) continue;
      long recovered = Long.parseLong(r.group(1));
      if (recovered < acknowledged) {
        fail(prog.name + " (seed " + seed + ", start " + starts + "): recovered " + recovered
            + " but " + acknowledged + " was acknowledged before the power cut");
      }
      Matcher a = ACK.matcher(o);
      while (a.find()) acknowledged = Math.max(acknowledged, Long.parseLong(a.group(1)));
    }
    // The last cut's image, recovered and checked.
    checkedStart(prog, agent, seed, starts, acknowledged, out, err);
    System.out.println(prog.name + ": " + cut + " power cuts in " + (starts - 2)
        + " starts (cut at/of points:" + drawn + "), every image recovered consistent");
  }

  /**
   * A start that must run to its end: it recovers the image (nothing acknowledged missing, the
   * program's own checks pass) and acknowledges more; returns the highest acknowledged count.
   */
  private static long checkedStart(Program prog, String agent, long seed, int start,
      long acknowledged, Path out, Path err) throws Exception {
    Process p = Jvm.start(true, agent, out, err, prog.main, prog.args);
    int status = Jvm.run(p, 600);
    String o = Files.readString(out);
    Matcher r = RECOVERED.matcher(o);
    if (status != 0 || o.contains("INCONSISTENT") || !r.find()) {
      fail(prog.name + " (seed " + seed + ", start " + start + "): exit " + status + "\n" + o
          + Files.readString(err));
    }
    long recovered = Long.parseLong(r.group(1));
    if (recovered < acknowledged) {
      fail(prog.name + " (seed " + seed + ", start " + start + "): recovered " + recovered
          + " but " + acknowledged + " was acknowledged before the power cut");
    }
    Matcher a = ACK.matcher(o);
    while (a.find()) acknowledged = Math.max(acknowledged, Long.parseLong(a.group(1)));
    return acknowledged;
  }

  @Test
  void wholeProgramsSurvivePowerCuts() throws Exception {
    int cuts = Integer.getInteger("kioku.programCuts", 5);
    String s = System.getenv("KIOKU_SEED");
    long seed = s != null ? Long.parseLong(s) : Long.getLong("kioku.seed", System.nanoTime());
    System.out.println("ProgramPowerCutIT seed " + seed + " (KIOKU_SEED to replay)");
    Path dir = Files.createTempDirectory("kioku-program-cuts-");
    try {
      cutLoop(new Program("primes", "kioku.examples.PrimeGenerator", new String[] {"+300"}), cuts, seed, dir);
      cutLoop(new Program("bank", "kioku.examples.Bank", new String[] {"2", "8", "400"}), cuts, seed + 1, dir);
    } finally {
      try (var files = Files.list(dir)) {
        for (Path f : (Iterable<Path>) files::iterator) Files.deleteIfExists(f);
      }
      Files.deleteIfExists(dir);
    }
  }
}
