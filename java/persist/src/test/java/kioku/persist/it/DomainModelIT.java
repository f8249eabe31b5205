package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
 * kioku.examples.DomainModel: records, BigDecimal and BigInteger, java.time, UUID, Optional,
 * List.of/Set.of/Map.of, unmodifiable and synchronized wrappers, EnumMap, EnumSet,
 * PriorityQueue, and hash maps and sets keyed by enums, in a persistent store that grows one
 * atomic block at a time; SIGKILLed at random moments and started again. After every start the
 * store holds exactly orders 1..counter, each equal field by field to what the program made
 * (and behaving: lookups by enum keys, Set.of contains, shared JDK instances still shared), and
 * no acknowledged order is lost. kioku.domainKills sets the kills (default 6).
 */
class DomainModelIT {
  private static final Pattern ACK = Pattern.compile("ack (\\d+)");
  private static final Pattern OK = Pattern.compile("ok orders=(\\d+)");
  private final Path dir = Files.createTempDirectory(Path.of("/dev/shm"), "kioku-domain-");

  DomainModelIT() throws Exception {}

  @AfterEach
  void clean() throws Exception {
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  private String check(Path pool) throws Exception {
    Path out = dir.resolve("check.out");
    Path err = dir.resolve("check.err");
    Process p = Jvm.start(true, "pool=" + pool, out, err, "kioku.examples.DomainModel", "check");
    int status = Jvm.run(p, 120);
    String o = Files.readString(out);
    assertEquals(0, status, o + Files.readString(err));
    return o;
  }

  @Test
  void everyValueTypeSurvivesRecoveryAndSigkill() throws Exception {
    Path pool = dir.resolve("domain.pool");
    Path out = dir.resolve("add.out");
    Path err = dir.resolve("add.err");
    // A clean run and a clean start first: every type comes back as it was written.
    Process first = Jvm.start(true, "pool=" + pool, out, err, "kioku.examples.DomainModel", "add", "40");
    assertEquals(0, Jvm.run(first, 120), Files.readString(out) + Files.readString(err));
    assertTrue(check(pool).contains("ok orders=40"));

    int kills = Integer.getInteger("kioku.domainKills", 6);
    String s = System.getenv("KIOKU_SEED");
    long seed = s != null ? Long.parseLong(s) : Long.getLong("kioku.seed", System.nanoTime());
    System.out.println("DomainModelIT seed " + seed + " (KIOKU_SEED to replay)");
    SplittableRandom rnd = new SplittableRandom(seed);
    long acknowledged = 40;
    int killed = 0;
    for (int start = 0; killed < kills; start++) {
      if (start > 3 * kills) fail("only " + killed + " kills in " + start + " starts");
      Process p = Jvm.start(true, "pool=" + pool, out, err, "kioku.examples.DomainModel", "add", "1000000");
      while (p.isAlive() && !Files.readString(out).contains("start counter=")) Thread.sleep(2);
      Thread.sleep(rnd.nextLong(400));
      if (!p.isAlive()) fail("ended early: " + Files.readString(out) + Files.readString(err));
      p.destroyForcibly().waitFor(); // SIGKILL
      killed++;
      String o = Files.readString(out);
      if (o.contains("INCONSISTENT")) fail("seed " + seed + ", start " + start + ":\n" + o);
      Matcher a = ACK.matcher(o);
      while (a.find()) acknowledged = Math.max(acknowledged, Long.parseLong(a.group(1)));
      Matcher ok = OK.matcher(check(pool));
      assertTrue(ok.find());
      long recovered = Long.parseLong(ok.group(1));
      if (recovered < acknowledged) {
        fail("seed " + seed + ", start " + start + ": " + recovered + " orders recovered, but order "
            + acknowledged + " was acknowledged before the kill");
      }
    }
    System.out.println("domain model: " + killed + " kills, " + acknowledged + " orders acknowledged, all kept");
  }
}
