package kioku.bench.persist;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import kioku.persist.KiokuPersist;

/**
 * One fresh pool per benchmark JVM. Its directory comes from the system property
 * {@code kioku.bench.shm} (medium shm: a directory on /dev/shm) or {@code kioku.bench.disk}
 * (medium file: a directory on a disk filesystem); run.sh sets both. The pool is deleted when the
 * JVM ends. Only this class and {@link Activation} name the kioku API, so benchmarks that run
 * without the agent never load it.
 */
final class Pools {
  private Pools() {}

  private static Path path;

  /** Opens (creates) this JVM's pool on {@code medium} ("shm" or "file") unless one is open. */
  static synchronized void open(String medium) {
    if (path != null) return;
    String key = medium.equals("file") ? "kioku.bench.disk" : "kioku.bench.shm";
    String dir = System.getProperty(key);
    if (dir == null) throw new IllegalStateException("set -D" + key + "=DIR (run.sh does)");
    Path p = Path.of(dir, "bench-" + ProcessHandle.current().pid() + "-" + medium + ".pool");
    try {
      Files.deleteIfExists(p);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    KiokuPersist.open(p, medium);
    path = p;
    Runtime.getRuntime().addShutdownHook(new Thread(Pools::delete, "bench-pool-delete"));
  }

  /** The persistent heap's numbers, one line, for the report (printed in the fork's output). */
  static synchronized void printStats(String what) {
    if (path == null) return;
    var s = KiokuPersist.stats();
    System.out.println(
        "KIOKU-STATS " + what + " objects=" + s.persistentObjects() + " usedBytes=" + s.usedBytes()
            + " capacityBytes=" + s.capacityBytes() + " gcRuns=" + s.gcRuns());
  }

  static synchronized long usedBytes() {
    return KiokuPersist.stats().usedBytes();
  }

  static synchronized long persistentObjects() {
    return KiokuPersist.stats().persistentObjects();
  }

  private static synchronized void delete() {
    if (path == null) return;
    try {
      KiokuPersist.close();
      Files.deleteIfExists(path);
    } catch (IOException | RuntimeException e) {
      System.err.println("bench: could not delete " + path + ": " + e);
    }
  }
}
