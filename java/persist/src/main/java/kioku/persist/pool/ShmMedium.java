package kioku.persist.pool;

import java.lang.invoke.VarHandle;
import java.nio.channels.FileChannel;
import java.nio.file.Path;

/**
 * A file on tmpfs (/dev/shm). Its pages are the file, so a store is the file's content as soon
 * as the CPU makes it and any later process mapping the file sees it: this survives the death of
 * every process, not power loss or reboot. Flush and drain are only fences. Refuses a file on
 * a disk filesystem, where no-op flushes would make nothing durable.
 */
public final class ShmMedium extends MappedMedium {

  /** Maps {@code path} (read-write, not locked) in windows of 1 GiB. */
  public ShmMedium(Path path) throws PoolException {
    this(path, DEFAULT_WINDOW);
  }

  /** Maps {@code path} in windows of {@code windowSize} bytes (a power of two ≥ 4096). */
  public ShmMedium(Path path, long windowSize) throws PoolException {
    this(Media.openChannel(path), path, path.toString(), windowSize);
  }

  /** Maps an opened file; takes over {@code channel} (closed by {@link #close}). */
  ShmMedium(FileChannel channel, Path file, String shown, long windowSize)
      throws PoolException {
    super(requireTmpfs(channel, file, shown), file, shown, windowSize,
        FileChannel.MapMode.READ_WRITE);
  }

  private static FileChannel requireTmpfs(FileChannel channel, Path file, String shown)
      throws PoolException {
    if (!Media.isTmpfs(file, shown)) {
      Media.closeQuietly(channel);
      throw PoolException.notTmpfs(shown);
    }
    return channel;
  }

  @Override
  public MediumKind kind() {
    return MediumKind.SHM;
  }

  @Override
  boolean durableGrow() {
    return false; // fsync on tmpfs does nothing; the new size is visible to others at once
  }

  @Override
  public void flush(long off, long len) {
    checkRange(off, len);
    // Stores before the flush must not move after it (compiler or CPU).
    VarHandle.fullFence();
  }

  @Override
  public void drain() {
    VarHandle.fullFence();
  }

  /** A flush and a drain are the same fence here: one is enough. */
  @Override
  public void persist(long off, long len) {
    checkRange(off, len);
    VarHandle.fullFence();
  }
}
