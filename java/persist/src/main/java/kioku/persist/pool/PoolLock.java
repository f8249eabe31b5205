package kioku.persist.pool;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Exclusive use of a pool file. Three layers, because Java cannot call flock(2):
 *
 * <ol>
 *   <li>a JVM-wide set of held files (device, inode), checked <i>before</i> a descriptor is
 *       opened — closing any descriptor of a file drops every POSIX lock the process holds on
 *       it, so a second open in this JVM must not even open the file;
 *   <li>a POSIX record lock ({@link FileChannel#tryLock}), which excludes other Java processes;
 *   <li>/proc/locks: a FLOCK on the same file held by another process (how the Rust side
 *       locks) makes the pool busy.
 * </ol>
 *
 * <p>Limits: the Rust side does not see the POSIX lock (its flock succeeds), and a Rust process
 * may take its flock after the /proc/locks check. Code in this JVM must not open and close the
 * pool file by other means while the pool is open (that would drop the POSIX lock).
 */
final class PoolLock {
  private record FileKey(long dev, long ino) {}

  private static final Set<FileKey> HELD = ConcurrentHashMap.newKeySet();

  private final FileKey key;
  private final String shown;
  private boolean released;

  private PoolLock(FileKey key, String shown) {
    this.key = key;
    this.shown = shown;
  }

  /** Claims {@code file} for this JVM (no descriptor is opened); BUSY if it is claimed. */
  static PoolLock claim(Path file, String shown) throws PoolException {
    FileKey key;
    try {
      Map<String, Object> a = Files.readAttributes(file, "unix:dev,ino");
      key = new FileKey((Long) a.get("dev"), (Long) a.get("ino"));
    } catch (NoSuchFileException e) {
      throw PoolException.notFound(shown);
    } catch (IOException | UnsupportedOperationException e) {
      throw PoolException.io("stat", shown, e);
    }
    if (!HELD.add(key)) {
      throw PoolException.busy(shown, ProcessHandle.current().pid());
    }
    return new PoolLock(key, shown);
  }

  /** Takes the POSIX lock on {@code channel} and checks for a FLOCK held elsewhere. */
  void lock(FileChannel channel) throws PoolException {
    FileLock lock;
    try {
      lock = channel.tryLock();
    } catch (OverlappingFileLockException e) {
      throw PoolException.busy(shown, ProcessHandle.current().pid());
    } catch (IOException e) {
      throw PoolException.io("lock", shown, e);
    }
    if (lock == null) {
      throw PoolException.busy(shown, holder(false));
    }
    long flocker = holder(true);
    if (flocker >= 0) {
      throw PoolException.busy(shown, flocker);
    }
  }

  /** Forgets the claim; call after the channel (and so the POSIX lock) is closed. */
  void release() {
    if (!released) {
      released = true;
      HELD.remove(key);
    }
  }

  /** The pid of another process holding a lock (only a FLOCK when {@code flockOnly}), or -1. */
  private long holder(boolean flockOnly) {
    String text;
    try {
      text = Files.readString(Path.of("/proc/locks"));
    } catch (IOException e) {
      return -1;
    }
    return findHolder(text, key.dev(), key.ino(), ProcessHandle.current().pid(), flockOnly);
  }

  /**
   * Parses /proc/locks lines such as {@code 1: FLOCK  ADVISORY  WRITE 1234 fe:01:5678 0 EOF};
   * blocked waiters ({@code 1: -> FLOCK ...}) are skipped.
   */
  static long findHolder(String text, long dev, long ino, long me, boolean flockOnly) {
    long major = ((dev >>> 8) & 0xfff) | ((dev >>> 32) & ~0xfffL);
    long minor = (dev & 0xff) | ((dev >>> 12) & ~0xffL);
    String want = String.format("%02x:%02x:%d", major, minor, ino);
    for (String line : text.split("\n")) {
      String[] f = line.trim().split("\\s+");
      if (f.length < 6 || f[1].equals("->") || (flockOnly && !f[1].equals("FLOCK"))) {
        continue;
      }
      long pid;
      try {
        pid = Long.parseLong(f[4]);
      } catch (NumberFormatException e) {
        continue;
      }
      if (f[5].equals(want) && pid > 0 && pid != me) {
        return pid;
      }
    }
    return -1;
  }
}
