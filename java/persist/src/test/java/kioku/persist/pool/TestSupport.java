package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.extension.AnnotatedElementContext;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.io.TempDirFactory;

/** Where the tests find the shared vectors, the Rust CLI and a durable (non-tmpfs) directory. */
final class TestSupport {
  private TestSupport() {}

  /** tests/vectors of the repository (surefire sets {@code kioku.vectors}). */
  static Path vectorsDir() {
    String p = System.getProperty("kioku.vectors");
    Path dir = p != null ? Path.of(p) : Path.of("../../tests/vectors");
    return dir.toAbsolutePath().normalize();
  }

  /**
   * The Rust CLI of the repository, found from the vectors directory upwards: the newer of
   * target/release/kioku and target/debug/kioku (what `cargo test` builds, which `make test` runs
   * before Java's tests), so that a stale build is not taken over a fresh one.
   */
  static Optional<Path> kiokuBinary() {
    for (Path d = vectorsDir(); d != null; d = d.getParent()) {
      Path best = null;
      for (String build : new String[] {"release", "debug"}) {
        Path bin = d.resolve("target").resolve(build).resolve("kioku");
        if (Files.isExecutable(bin) && (best == null || modified(bin) > modified(best))) {
          best = bin;
        }
      }
      if (best != null) {
        return Optional.of(best);
      }
    }
    return Optional.empty();
  }

  private static long modified(Path p) {
    try {
      return Files.getLastModifiedTime(p).toMillis();
    } catch (IOException e) {
      return 0;
    }
  }

  static boolean isTmpfs(Path p) throws IOException {
    return "tmpfs".equals(Files.getFileStore(p).type());
  }

  /**
   * A base for temporary directories that is not tmpfs (the file medium refuses tmpfs):
   * java.io.tmpdir, or target/ when that is tmpfs.
   */
  static Path durableBase() throws IOException {
    Path tmp = Path.of(System.getProperty("java.io.tmpdir"));
    if (!isTmpfs(tmp)) {
      return tmp;
    }
    Path target = Path.of("target", "pool-test-tmp").toAbsolutePath();
    Files.createDirectories(target);
    return target;
  }

  /** For {@code @TempDir(factory = Durable.class)}. */
  static final class Durable implements TempDirFactory {
    @Override
    public Path createTempDirectory(AnnotatedElementContext element, ExtensionContext context)
        throws IOException {
      return Files.createTempDirectory(durableBase(), "kioku-pool-test-");
    }
  }

  /** Runs {@code action}, which must fail with {@code reason}; returns the exception. */
  static PoolException expect(PoolException.Reason reason, Action action) {
    try {
      action.run();
    } catch (PoolException e) {
      assertEquals(reason, e.reason(), e.getMessage());
      assertTrue(!e.getMessage().contains("\n"), "one-line message: " + e.getMessage());
      return e;
    } catch (Exception e) {
      throw new AssertionError("expected " + reason + ", got " + e, e);
    }
    return fail("expected " + reason + ", but it succeeded");
  }

  @FunctionalInterface
  interface Action {
    void run() throws Exception;
  }

  /** Deterministic content byte {@code i} of a section filled with {@code seed}. */
  static byte fill(long seed, long i) {
    return (byte) ((seed * 0x9E3779B97F4A7C15L) >>> 56 ^ (i % 251));
  }

  /** The java executable running these tests and its classpath, for child JVMs. */
  static ProcessBuilder childJvm(Class<?> main, String... args) {
    Path javaBin = Path.of(System.getProperty("java.home"), "bin", "java");
    List<String> cmd = new ArrayList<>();
    cmd.add(javaBin.toString());
    cmd.add("-cp");
    cmd.add(System.getProperty("java.class.path"));
    cmd.add(main.getName());
    cmd.addAll(List.of(args));
    // stdout is the protocol with the parent; the child's log lines go to our stderr.
    return new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
  }
}
