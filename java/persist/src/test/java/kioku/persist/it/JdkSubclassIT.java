package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * kioku.examples.JdkSubclasses: persistent application subclasses of ArrayList, HashMap and
 * ArrayDeque, whose inherited fields only the JDK's retransformed code writes (its store sites
 * go by the identity hash, so such objects must get one before they get a replica word). Each
 * run ends in Runtime.halt without closing the pool; the next must find every entry.
 */
class JdkSubclassIT {
  private final Path dir = Files.createTempDirectory(Path.of("/dev/shm"), "kioku-jdksub-");

  JdkSubclassIT() throws Exception {}

  @AfterEach
  void clean() throws Exception {
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  @Test
  void jdkCodeWritesIntoPersistentApplicationSubclassesReachThePool() throws Exception {
    Path pool = dir.resolve("sub.pool");
    Path out = dir.resolve("out");
    Path err = dir.resolve("err");
    String[] expected = {
      "found runs=0 tally=[] index={} pending=[]",
      "found runs=1 tally=[r1] index={r1=1} pending=[1]",
      "found runs=2 tally=[r1, r2] index={r1=1, r2=2} pending=[1, 2]",
      "found runs=3 tally=[r1, r2, r3] index={r1=1, r2=2, r3=3} pending=[2, 3]",
    };
    for (String want : expected) {
      Process p = Jvm.start(true, "pool=" + pool, out, err, "kioku.examples.JdkSubclasses");
      assertEquals(0, Jvm.run(p, 120), Files.readString(out) + Files.readString(err));
      String o = Files.readString(out);
      assertTrue(o.startsWith(want + "\n"), "want " + want + ", got:\n" + o + Files.readString(err));
    }
  }
}
