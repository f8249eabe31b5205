package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * kioku.examples.HotArrayLoop: a C2-compiled loop whose primitive array stores had no barrier
 * (no array of that class was persistent) keeps storing after its array becomes persistent;
 * after a halt, the pool must hold the loop's last pass in every element.
 */
class HotLoopIT {
  private final Path dir = Files.createTempDirectory(Path.of("/dev/shm"), "kioku-hotloop-");

  HotLoopIT() throws Exception {}

  @AfterEach
  void clean() throws Exception {
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  @Test
  void aCompiledLoopWithoutBarrierIsDeoptimizedWhenItsArrayBecomesPersistent() throws Exception {
    Path pool = dir.resolve("hot.pool");
    Path out = dir.resolve("out");
    Path err = dir.resolve("err");
    Process first = Jvm.start("pool=" + pool, out, err, "kioku.examples.HotArrayLoop");
    assertEquals(0, Jvm.run(first, 180), Files.readString(out) + Files.readString(err));
    String o = Files.readString(out);
    assertTrue(o.startsWith("done lastPass="), o + Files.readString(err));
    String last = o.substring("done lastPass=".length(), o.indexOf(' ', "done lastPass=".length()));
    Process second = Jvm.start("pool=" + pool, out, err, "kioku.examples.HotArrayLoop");
    assertEquals(0, Jvm.run(second, 180), Files.readString(out) + Files.readString(err));
    assertEquals("checked lastPass=" + last + " length=4096 stale=0\n", Files.readString(out),
        Files.readString(err));
  }
}
