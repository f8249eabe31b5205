package kioku.persist.pool;

import java.lang.invoke.VarHandle;
import java.nio.channels.FileChannel;
import java.nio.file.Path;

/**
 * A file on tmpfs (/dev/shm). Its pages are the file, so a store is the file's content as soon
 * as the CPU makes it and any later process mapping the file sees it: this survives the death of
 * every process, not power loss or reboot. Flush does nothing and drain only keeps stores in
 * order (a store-store fence: no instruction on x86). Refuses a file on
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

  /**
   * Nothing to write back: the pages are the file. Unordered until {@link #drain}, as on every
   * medium.
   */
  @Override
  public void flush(long off, long len) {}

  /**
   * Keeps the stores before it ahead of the stores after it (compiler and CPU): what survives
   * the death of a process is every store it made, in order, so order is all durability needs
   * here. No StoreLoad fence: callers that need one between threads take it themselves.
   */
  @Override
  public void drain() {
    VarHandle.storeStoreFence();
  }

  /** A flush and a drain: one store-store fence. */
  @Override
  public void persist(long off, long len) {
    VarHandle.storeStoreFence();
  }

  @Override
  public boolean durableInStoreOrder() {
    return true;
  }
}
