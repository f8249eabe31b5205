package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import kioku.persist.pool.MediumChoice;
import kioku.persist.pool.Pool;
import org.junit.jupiter.api.Test;

/**
 * Bad input at start-up: each case is one line on stderr saying what to do, exit status 2,
 * and the pool file byte for byte as it was.
 */
class BadInputIT {
  private final Path dir = Files.createTempDirectory(Path.of("/dev/shm"), "kioku-bad-");

  BadInputIT() throws Exception {}

  @org.junit.jupiter.api.AfterEach
  void clean() throws Exception {
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }

  /** Runs the counter on {@code pool} (with extra class-path entries first). */
  private record Run(int status, String out, List<String> errLines) {}

  private Run counter(Path pool, String classPathFirst, String... args) throws Exception {
    Path out = dir.resolve("out");
    Path err = dir.resolve("err");
    Process p;
    if (classPathFirst == null) {
      p = Jvm.start(true, "pool=" + pool, out, err, "kioku.examples.Counter", args);
    } else {
      p = Jvm.startWithClassPath(classPathFirst, "pool=" + pool, out, err, "kioku.examples.Counter", args);
    }
    int status = Jvm.run(p, 120);
    List<String> lines = Files.readAllLines(err).stream()
        .filter(l -> !l.contains("Sharing is only supported")) // the JVM's CDS notice
        .toList();
    return new Run(status, Files.readString(out), lines);
  }

  private static void assertRefused(Run r, String expect) {
    assertEquals(2, r.status, r.out + r.errLines);
    assertEquals(1, r.errLines.size(), "one line: " + r.errLines);
    assertTrue(r.errLines.get(0).startsWith("kioku-persist: "), r.errLines.get(0));
    assertTrue(r.errLines.get(0).contains(expect), r.errLines.get(0));
  }

  @Test
  void theCounterCountsAcrossRuns() throws Exception {
    Path pool = dir.resolve("count.pool");
    assertEquals("count 1", counter(pool, null).out.strip());
    assertEquals("count 2", counter(pool, null).out.strip());
  }

  @Test
  void aPoolWhoseCreationWasInterruptedIsFinished() throws Exception {
    // A SIGKILL between creating the pool file and the heap's first commit leaves a heap pool
    // with nothing committed: no data, so the next start makes the heap in it.
    Path pool = dir.resolve("unfinished.pool");
    Pool.create(pool, "kioku.persist", MediumChoice.AUTO).close();
    assertEquals("count 1", counter(pool, null).out.strip());
    assertEquals("count 2", counter(pool, null).out.strip());
  }

  @Test
  void aFileThatIsNotAPool() throws Exception {
    Path f = dir.resolve("notes.txt");
    Files.writeString(f, "these are someone's notes, not a pool\n".repeat(300));
    byte[] before = Files.readAllBytes(f);
    assertRefused(counter(f, null), "not a kioku pool");
    assertArrayEquals(before, Files.readAllBytes(f));
  }

  @Test
  void aPoolOfAnotherKind() throws Exception {
    Path f = dir.resolve("ckpt.pool");
    Pool.create(f, "kioku.ckpt", MediumChoice.AUTO).close();
    byte[] before = Files.readAllBytes(f);
    assertRefused(counter(f, null), "not a Java persistent heap");
    assertArrayEquals(before, Files.readAllBytes(f));
  }

  @Test
  void aTruncatedPool() throws Exception {
    Path pool = dir.resolve("trunc.pool");
    assertEquals("count 1", counter(pool, null).out.strip());
    byte[] whole = Files.readAllBytes(pool);
    Files.write(pool, java.util.Arrays.copyOf(whole, whole.length / 2));
    byte[] before = Files.readAllBytes(pool);
    assertRefused(counter(pool, null), "truncated");
    assertArrayEquals(before, Files.readAllBytes(pool));
  }

  @Test
  void aPoolInUse() throws Exception {
    Path pool = dir.resolve("busy.pool");
    Path out = dir.resolve("holder.out");
    Process holder = Jvm.start(true, "pool=" + pool, out, dir.resolve("holder.err"), "kioku.examples.Counter", "hold");
    try {
      while (!Files.readString(out).contains("count")) {
        assertTrue(holder.isAlive(), "the holder died");
        Thread.sleep(20);
      }
      byte[] before = Files.readAllBytes(pool);
      assertRefused(counter(pool, null), "in use by");
      assertArrayEquals(before, Files.readAllBytes(pool));
    } finally {
      holder.destroyForcibly().waitFor();
    }
  }

  @Test
  void aClassThatChangedIncompatibly() throws Exception {
    Path pool = dir.resolve("versions.pool");
    assertEquals("count 1", counter(pool, null).out.strip());
    // Version 2 of Counter.State: count became a String.
    Path src = dir.resolve("src/kioku/examples");
    Files.createDirectories(src);
    Files.writeString(src.resolve("Counter.java"), """
        package kioku.examples;
        import kioku.persist.DurableRoot;
        public class Counter {
          public static class State { String count = "0"; }
          @DurableRoot static State state;
          public static void main(String[] args) {
            if (state == null) state = new State();
            System.out.println("count " + state.count);
          }
        }
        """);
    Path classes = dir.resolve("v2");
    Files.createDirectories(classes);
    JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
    int rc = javac.run(null, null, null, "-d", classes.toString(), "-cp", Jvm.agentJar().toString(),
        src.resolve("Counter.java").toString());
    assertEquals(0, rc, "compiling version 2");
    byte[] before = Files.readAllBytes(pool);
    Run r = counter(pool, classes.toString());
    assertRefused(r, "changed type from J to Ljava/lang/String;");
    assertTrue(r.errLines.get(0).contains("kioku.examples.Counter$State#count"), r.errLines.get(0));
    assertArrayEquals(before, Files.readAllBytes(pool));
  }
}
