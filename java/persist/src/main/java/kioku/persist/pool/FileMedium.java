package kioku.persist.pool;

import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.file.Path;

/**
 * An ordinary file on a disk filesystem, mapped shared. {@link #flush} only records the range;
 * {@link #drain} msyncs every recorded range ({@code MappedByteBuffer.force(index, len)}), which
 * writes the dirty pages and flushes the device cache, so a commit's ranges cost one drain.
 * Refuses a file on tmpfs: it would look durable but vanish with the machine.
 */
public final class FileMedium extends MappedMedium {
  private final FlushRanges flushed = new FlushRanges();

  /** Maps {@code path} (read-write, not locked) in windows of 1 GiB. */
  public FileMedium(Path path) throws PoolException {
    this(path, DEFAULT_WINDOW);
  }

  /** Maps {@code path} in windows of {@code windowSize} bytes (a power of two ≥ 4096). */
  public FileMedium(Path path, long windowSize) throws PoolException {
    this(Media.openChannel(path), path, path.toString(), windowSize);
  }

  /** Maps an opened file; takes over {@code channel} (closed by {@link #close}). */
  FileMedium(FileChannel channel, Path file, String shown, long windowSize)
      throws PoolException {
    super(refuseTmpfs(channel, file, shown), file, shown, windowSize,
        FileChannel.MapMode.READ_WRITE);
  }

  private static FileChannel refuseTmpfs(FileChannel channel, Path file, String shown)
      throws PoolException {
    if (Media.isTmpfs(file, shown)) {
      Media.closeQuietly(channel);
      throw PoolException.tmpfsNotDurable(shown);
    }
    return channel;
  }

  @Override
  public MediumKind kind() {
    return MediumKind.FILE;
  }

  @Override
  boolean durableGrow() {
    return true;
  }

  @Override
  public void flush(long off, long len) {
    checkRange(off, len);
    flushed.add(off, len, length());
  }

  /**
   * msync of every range flushed since the last drain.
   *
   * @throws UncheckedIOException when the kernel reports a write-back error
   */
  @Override
  public void drain() {
    for (long[] r : flushed.take()) {
      forceRange(r[0], r[1] - r[0]);
    }
  }

  /** Ranges flushed and not yet drained (coalesced); for tests. */
  int pendingRanges() {
    return flushed.size();
  }
}
