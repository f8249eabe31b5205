package kioku.persist;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The thesis's API, for programs written against it:
 *
 * <pre>
 * Recovery.setNvmFile("data.pool");
 * if (Recovery.isValidData()) Recovery.recovery(Main.class.getClassLoader());
 * else Recovery.init();
 * </pre>
 *
 * The same as {@link KiokuPersist#open(Path)} followed by {@link KiokuPersist#recover}.
 */
public final class Recovery {
  private Recovery() {}

  private static Path file;

  /** Names the pool file. */
  public static synchronized void setNvmFile(String path) {
    file = Path.of(path);
  }

  /** True if the pool exists and holds persistent state. Opens it. */
  public static synchronized boolean isValidData() {
    Path f = need();
    if (!KiokuPersist.isOpen()) {
      if (!Files.exists(f)) return false;
      KiokuPersist.open(f);
    }
    return KiokuPersist.hasData();
  }

  /** Rebuilds the persistent objects and assigns every durable root. */
  public static synchronized void recovery(ClassLoader... loaders) {
    if (!KiokuPersist.isOpen()) KiokuPersist.open(need());
    KiokuPersist.recover(loaders);
  }

  /**
   * Starts with an empty persistent heap (creating the pool if needed). Refuses a pool that
   * holds data: recover it, or delete the file to start over.
   */
  public static synchronized void init() {
    Path f = need();
    if (!KiokuPersist.isOpen()) KiokuPersist.open(f);
    if (KiokuPersist.hasData()) {
      throw new PersistenceException(
          "pool " + f + " holds persistent data: call Recovery.recovery(), or delete the file to"
              + " start over");
    }
  }

  private static Path need() {
    if (file == null) {
      throw new PersistenceException("call Recovery.setNvmFile(path) first");
    }
    return file;
  }
}
