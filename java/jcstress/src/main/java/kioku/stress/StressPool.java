package kioku.stress;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import kioku.persist.KiokuPersist;

/**
 * The persistent pool of one forked test JVM: opened by this class's initializer, under a
 * name unique to the process, and deleted when the JVM exits. Pools left behind by JVMs that
 * were killed (a jcstress time-out) are deleted by the next one.
 *
 * <p>The directory is {@code kioku.stress.dir} if set, else the shared-memory file system when
 * the machine has one, else {@code java.io.tmpdir}.
 */
public final class StressPool {
  private StressPool() {}

  private static final String PREFIX = "kioku-jcstress-";
  private static final Pattern NAME = Pattern.compile("\\.?" + PREFIX + "(\\d+)\\.pool.*");

  /** The pool of this JVM. */
  public static final Path PATH;

  static {
    Path dir = directory();
    long pid = ProcessHandle.current().pid();
    PATH = dir.resolve(PREFIX + pid + ".pool");
    deleteStale(dir, pid);
    try {
      Files.deleteIfExists(PATH); // a pid reused after a kill: start empty
    } catch (IOException e) {
      throw new IllegalStateException("cannot remove the old pool " + PATH + ": " + e.getMessage(), e);
    }
    Runtime.getRuntime().addShutdownHook(new Thread(StressPool::closeAndDelete, "kioku-stress-pool"));
    KiokuPersist.open(PATH);
  }

  /** Opens the pool (once per JVM): call before any class that declares durable roots. */
  public static void open() {
    // the work is in the initializer
  }

  private static Path directory() {
    String set = System.getProperty("kioku.stress.dir");
    if (set != null && !set.isBlank()) return Path.of(set);
    Path shm = Path.of("/dev/shm");
    if (Files.isDirectory(shm) && Files.isWritable(shm)) return shm;
    return Path.of(System.getProperty("java.io.tmpdir"));
  }

  private static void deleteStale(Path dir, long self) {
    try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*" + PREFIX + "*")) {
      for (Path p : ds) {
        Matcher m = NAME.matcher(p.getFileName().toString());
        if (!m.matches()) continue;
        long pid = Long.parseLong(m.group(1));
        if (pid == self || ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) continue;
        try {
          Files.deleteIfExists(p);
        } catch (IOException e) {
          // another JVM got there first, or not ours to delete
        }
      }
    } catch (IOException e) {
      // nothing to clean
    }
  }

  private static void closeAndDelete() {
    try {
      KiokuPersist.close();
    } catch (RuntimeException e) {
      System.err.println("kioku-stress: closing the pool failed: " + e);
    }
    try {
      Files.deleteIfExists(PATH);
    } catch (IOException e) {
      System.err.println("kioku-stress: cannot delete " + PATH + ": " + e.getMessage());
    }
  }
}
