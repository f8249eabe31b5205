package kioku.persist.pool;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import jdk.nio.mapmode.ExtendedMapMode;

/**
 * Chooses and opens the medium for a pool file (docs/media.md, "Choosing a medium"):
 * {@link MediumChoice#AUTO} takes dax when the filesystem accepts a MAP_SYNC mapping, shm when
 * the file is on tmpfs, else file; an exact choice gives that kind or the error saying why it
 * cannot be used here. The choice is logged once at INFO with what the medium survives.
 */
public final class Media {
  private Media() {}

  private static final System.Logger LOG = System.getLogger("kioku.persist.pool");

  /**
   * Opens and maps the file at {@code path} (read-write; no lock is taken — {@link Pool} locks).
   * The simulator is not a choice: build a {@link SimMedium}, or {@link SimMedium#load} an image.
   */
  public static Medium open(Path path, MediumChoice choice) throws PoolException {
    return open(openChannel(path), path, path.toString(), choice);
  }

  /** Maps an opened file on the chosen medium; takes over {@code channel}. */
  static Medium open(FileChannel channel, Path file, String shown, MediumChoice choice)
      throws PoolException {
    String reason = "requested";
    Medium m;
    try {
      switch (choice) {
        case AUTO -> {
          if (mapSyncSupported(channel, file, shown)) {
            m = new DaxMedium(channel, file, shown, MappedMedium.DEFAULT_WINDOW);
            reason = "auto: the filesystem accepts MAP_SYNC";
          } else if (isTmpfs(file, shown)) {
            m = new ShmMedium(channel, file, shown, MappedMedium.DEFAULT_WINDOW);
            reason = "auto: no MAP_SYNC, file is on tmpfs";
          } else {
            m = new FileMedium(channel, file, shown, MappedMedium.DEFAULT_WINDOW);
            reason = "auto: no MAP_SYNC, not tmpfs";
          }
        }
        case DAX -> m = new DaxMedium(channel, file, shown, MappedMedium.DEFAULT_WINDOW);
        case FILE -> m = new FileMedium(channel, file, shown, MappedMedium.DEFAULT_WINDOW);
        case SHM -> m = new ShmMedium(channel, file, shown, MappedMedium.DEFAULT_WINDOW);
        default -> throw new AssertionError(choice);
      }
    } catch (PoolException e) {
      closeQuietly(channel);
      throw e;
    }
    LOG.log(System.Logger.Level.DEBUG, "pool medium selected path={0} medium=\"{1}\""
        + " durability=\"{2}\" reason=\"{3}\"", shown, m.kind(), m.durability(), reason);
    return m;
  }

  /** Opens a pool file read-write. */
  /**
   * Refuses a symbolic link at {@code path} in a directory other users can write (sticky or
   * world-writable, like /tmp and /dev/shm): there it may be a trap someone else set. Links in
   * one's own directories are followed as usual.
   */
  static void refusePlantedLink(Path path) throws PoolException {
    if (!Files.isSymbolicLink(path)) {
      return;
    }
    Path dir = path.toAbsolutePath().getParent();
    int mode;
    try {
      mode = (Integer) Files.getAttribute(dir, "unix:mode");
    } catch (IOException | UnsupportedOperationException e) {
      throw PoolException.io("stat", String.valueOf(dir), e);
    }
    if ((mode & 01002) != 0) {
      throw PoolException.symlink(path.toString());
    }
  }

  static FileChannel openChannel(Path path) throws PoolException {
    try {
      return FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE);
    } catch (NoSuchFileException e) {
      throw PoolException.notFound(path.toString());
    } catch (IOException e) {
      throw PoolException.io("open", path.toString(), e);
    }
  }

  /** True when {@code file} is on tmpfs. */
  static boolean isTmpfs(Path file, String shown) throws PoolException {
    try {
      return "tmpfs".equals(Files.getFileStore(file).type());
    } catch (IOException e) {
      throw PoolException.io("statfs", shown, e);
    }
  }

  /** Fails with DAX_UNSUPPORTED unless {@code file}'s filesystem accepts MAP_SYNC. */
  static void probeMapSync(FileChannel channel, Path file, String shown) throws PoolException {
    if (!mapSyncSupported(channel, file, shown)) {
      throw PoolException.daxUnsupported(shown, null);
    }
  }

  /**
   * True when a MAP_SYNC mapping of the file works; false when the kernel (or the JDK) refuses
   * one. Maps at most a page of the file, never beyond its end (a map past the end would extend
   * the file); an empty file is probed through a scratch file in the same directory.
   */
  static boolean mapSyncSupported(FileChannel channel, Path file, String shown)
      throws PoolException {
    try {
      long len = channel.size();
      if (len > 0) {
        channel.map(ExtendedMapMode.READ_WRITE_SYNC, 0, Math.min(len, Format.PAGE_SIZE));
        return true;
      }
      Path dir = file.toAbsolutePath().getParent();
      Path probe = Files.createTempFile(dir, ".kioku-dax-probe-", ".tmp");
      try (FileChannel p = FileChannel.open(probe, StandardOpenOption.READ,
          StandardOpenOption.WRITE)) {
        MappedMedium.extendWithZeros(p, 0, Format.PAGE_SIZE);
        p.map(ExtendedMapMode.READ_WRITE_SYNC, 0, Format.PAGE_SIZE);
        return true;
      } finally {
        Files.deleteIfExists(probe);
      }
    } catch (IOException | UnsupportedOperationException e) {
      if (refusesMapSync(e)) {
        return false;
      }
      throw PoolException.io("mmap MAP_SYNC", shown, e);
    }
  }

  /**
   * Whether a failed map call means "no MAP_SYNC here": the JDK refuses sync mappings it cannot
   * support (UnsupportedOperationException), the kernel answers EOPNOTSUPP or EINVAL.
   */
  static boolean refusesMapSync(Exception e) {
    if (e instanceof UnsupportedOperationException) {
      return true;
    }
    String m = String.valueOf(e.getMessage());
    return m.contains("not supported") || m.contains("unsupported")
        || m.contains("Invalid argument");
  }

  static void closeQuietly(FileChannel channel) {
    try {
      channel.close();
    } catch (IOException e) {
      // Closing a channel we are giving up on; nothing to keep.
    }
  }
}
