package kioku.persist.pool;

import java.lang.invoke.VarHandle;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import jdk.nio.mapmode.ExtendedMapMode;

/**
 * Persistent memory on a DAX filesystem, mapped with MAP_SYNC
 * ({@link ExtendedMapMode#READ_WRITE_SYNC}): the kernel makes a page's metadata durable before a
 * write fault on it completes, so data is durable once its cache lines are written back and
 * fenced. {@link #flush} is {@code MappedByteBuffer.force(index, len)}, which on a sync mapping
 * the JDK implements with cache-line write-back instructions and no system call; {@link #drain}
 * is a fence. Fails with {@code DAX_UNSUPPORTED} where the kernel refuses MAP_SYNC.
 */
public final class DaxMedium extends MappedMedium {

  /** Maps {@code path} (read-write, not locked) in windows of 1 GiB. */
  public DaxMedium(Path path) throws PoolException {
    this(path, DEFAULT_WINDOW);
  }

  /** Maps {@code path} in windows of {@code windowSize} bytes (a power of two ≥ 4096). */
  public DaxMedium(Path path, long windowSize) throws PoolException {
    this(Media.openChannel(path), path, path.toString(), windowSize);
  }

  /** Maps an opened file; takes over {@code channel} (closed by {@link #close}). */
  DaxMedium(FileChannel channel, Path file, String shown, long windowSize)
      throws PoolException {
    super(requireMapSync(channel, file, shown), file, shown, windowSize,
        ExtendedMapMode.READ_WRITE_SYNC);
  }

  private static FileChannel requireMapSync(FileChannel channel, Path file, String shown)
      throws PoolException {
    try {
      Media.probeMapSync(channel, file, shown);
    } catch (PoolException e) {
      Media.closeQuietly(channel);
      throw e;
    }
    return channel;
  }

  @Override
  PoolException mapFailed(Exception e) {
    return Media.refusesMapSync(e) ? PoolException.daxUnsupported(shown, e)
        : PoolException.io("mmap MAP_SYNC", shown, e);
  }

  @Override
  public MediumKind kind() {
    return MediumKind.DAX;
  }

  @Override
  boolean durableGrow() {
    return true;
  }

  @Override
  public void flush(long off, long len) {
    checkRange(off, len);
    forceRange(off, len);
  }

  @Override
  public void drain() {
    VarHandle.fullFence();
  }
}
