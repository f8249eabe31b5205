package kioku.persist.pool;

import java.io.IOException;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.LongBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * A pool file mapped shared in windows of a power-of-two size (1 GiB by default: a
 * MappedByteBuffer holds at most 2 GiB). The accessors find the window with a shift and a mask;
 * a window size that is a multiple of the page size means an aligned access never straddles
 * two windows (unaligned multi-byte accesses must not straddle one either). The subclasses say
 * how a store becomes durable.
 *
 * <p>Java 17 cannot unmap a buffer; replaced windows are unmapped by the garbage collector.
 */
abstract class MappedMedium implements Medium {
  /** Default window: 1 GiB. */
  static final long DEFAULT_WINDOW = 1L << 30;

  private static final int ZERO_CHUNK = 1 << 20;

  final FileChannel channel;
  /** Where the file is now (file-system questions, its directory). */
  volatile Path file;
  /** How messages name the file. */
  final String shown;
  private final FileChannel.MapMode mode;
  final long windowSize;
  private final int shift;
  private final long mask;
  /** Replaced (never mutated) on grow and close, so a reader sees a consistent array. */
  volatile MappedByteBuffer[] windows;
  /**
   * The same windows as little-endian long views, for bulk reads of whole replicas; replaced
   * with {@link #windows} (a reader that finds it shorter reads word by word).
   */
  private volatile LongBuffer[] longViews = new LongBuffer[0];
  private volatile long length;
  private boolean dirSynced;

  MappedMedium(FileChannel channel, Path file, String shown, long windowSize,
      FileChannel.MapMode mode) throws PoolException {
    if (Long.bitCount(windowSize) != 1 || windowSize < Format.PAGE_SIZE
        || windowSize > DEFAULT_WINDOW) {
      throw new IllegalArgumentException("window size " + windowSize
          + " must be a power of two from the page size to 1 GiB");
    }
    this.channel = channel;
    this.file = file;
    this.shown = shown;
    this.mode = mode;
    this.windowSize = windowSize;
    this.shift = Long.numberOfTrailingZeros(windowSize);
    this.mask = windowSize - 1;
    try {
      this.length = channel.size();
      setWindows(remap(new MappedByteBuffer[0], 0, length));
    } catch (PoolException e) {
      Media.closeQuietly(channel);
      throw e;
    } catch (IOException e) {
      Media.closeQuietly(channel);
      throw PoolException.io("fstat", shown, e);
    }
  }

  /**
   * Publishes new windows and their long views; a reader may see views fewer than the
   * windows (it then reads word by word), never views of windows already dropped.
   */
  private void setWindows(MappedByteBuffer[] w) {
    LongBuffer[] v = new LongBuffer[w.length];
    for (int i = 0; i < w.length; i++) v[i] = w[i].asLongBuffer(); // little-endian, as w[i]
    long[] a = new long[w.length];
    long[] c = new long[w.length];
    for (int i = 0; i < w.length; i++) {
      synchronized (everMapped) {
        everMapped.put(w[i], Boolean.TRUE);
      }
      a[i] = mode == FileChannel.MapMode.READ_WRITE ? NativeAddresses.of(w[i]) : 0;
      c[i] = w[i].capacity();
    }
    if (v.length < longViews.length) longViews = v; // close: drop the views first
    if (a.length < addresses.length) addresses = new long[0];
    windows = w;
    longViews = v;
    capacities = c;
    addresses = a;
  }

  /**
   * Every window this medium mapped: a mapping is undone only when its buffer is collected, so
   * holding them keeps an address {@link #address} gave valid while this medium is reachable,
   * even after a grow replaced the window (or a close dropped it).
   */
  private final Map<MappedByteBuffer, Boolean> everMapped = new IdentityHashMap<>();

  /** The windows' native addresses (0: none) and sizes; replaced after {@link #windows}. */
  private volatile long[] addresses = new long[0];

  private volatile long[] capacities = new long[0];

  /**
   * The native address of {@code [off, off+len)} if it lies in one window, else 0 (and 0 once
   * closed). Valid while this medium is reachable: the caller keeps it so
   * ({@code Reference.reachabilityFence}) until its last access through the address.
   */
  @Override
  public final long address(long off, long len) {
    long[] a = addresses;
    long[] c = capacities;
    int w = (int) (off >>> shift);
    long at = off & mask;
    if (off < 0 || len < 0 || w >= a.length || w >= c.length || at + len > c[w]) return 0;
    long base = a[w];
    return base == 0 ? 0 : base + at;
  }

  /** Windows for {@code [0, newLen)}: full old windows are kept, the rest is mapped anew. */
  private MappedByteBuffer[] remap(MappedByteBuffer[] old, long oldLen, long newLen)
      throws PoolException {
    int count = (int) ((newLen + windowSize - 1) >>> shift);
    MappedByteBuffer[] w = java.util.Arrays.copyOf(old, count);
    for (int i = (int) (oldLen >>> shift); i < count; i++) {
      long start = (long) i << shift;
      long size = Math.min(windowSize, newLen - start);
      try {
        MappedByteBuffer b = channel.map(mode, start, size);
        b.order(ByteOrder.LITTLE_ENDIAN);
        w[i] = b;
      } catch (IOException | UnsupportedOperationException e) {
        throw mapFailed(e);
      }
    }
    return w;
  }

  /** The error for a failed map call (dax says why MAP_SYNC is refused). */
  PoolException mapFailed(Exception e) {
    return PoolException.io("mmap", shown, e);
  }

  /** Whether a grow must make the new size durable (fsync of the file and its directory). */
  abstract boolean durableGrow();

  @Override
  public final long length() {
    return length;
  }

  /** Where the file was opened. */
  public final Path path() {
    return file;
  }

  /** The file got a new name (a new pool linked into place); same directory. */
  final void movedTo(Path newName) {
    file = newName;
  }

  @Override
  public final String durability() {
    return kind().durability();
  }

  final void checkRange(long off, long len) {
    Objects.checkFromIndexSize(off, len, length);
  }

  @Override
  public final long getLong(long off) {
    return windows[(int) (off >>> shift)].getLong((int) (off & mask));
  }

  @Override
  public final void getLongs(long off, long[] dst, int dstOff, int n) {
    LongBuffer[] v = longViews;
    int w = (int) (off >>> shift);
    long at = off & mask;
    // Aligned, inside one window (replicas never straddle one unless the window is tiny):
    // one bounds check and one copy; anything else word by word.
    if ((at & 7) == 0 && w < v.length && at + 8L * n <= windowSize) {
      v[w].get((int) (at >>> 3), dst, dstOff, n);
      return;
    }
    for (int i = 0; i < n; i++) dst[dstOff + i] = getLong(off + 8L * i);
  }

  /** Its own read-only mappings of small windows, unmapped as it moves on. */
  @Override
  public final ScanReads scanReads() {
    return scanReads(1);
  }

  @Override
  public final ScanReads scanReads(int readers) {
    return new WindowedScan(this, channel, length, WindowedScan.KEPT / Math.max(1, readers));
  }

  @Override
  public final void putLong(long off, long value) {
    windows[(int) (off >>> shift)].putLong((int) (off & mask), value);
  }

  @Override
  public final int getInt(long off) {
    return windows[(int) (off >>> shift)].getInt((int) (off & mask));
  }

  @Override
  public final void putInt(long off, int value) {
    windows[(int) (off >>> shift)].putInt((int) (off & mask), value);
  }

  @Override
  public final short getShort(long off) {
    return windows[(int) (off >>> shift)].getShort((int) (off & mask));
  }

  @Override
  public final void putShort(long off, short value) {
    windows[(int) (off >>> shift)].putShort((int) (off & mask), value);
  }

  @Override
  public final byte getByte(long off) {
    return windows[(int) (off >>> shift)].get((int) (off & mask));
  }

  @Override
  public final void putByte(long off, byte value) {
    windows[(int) (off >>> shift)].put((int) (off & mask), value);
  }

  @Override
  public final void get(long off, byte[] dst, int dstOff, int len) {
    checkRange(off, len);
    Objects.checkFromIndexSize(dstOff, len, dst.length);
    MappedByteBuffer[] w = windows;
    while (len > 0) {
      int at = (int) (off & mask);
      int n = (int) Math.min(len, windowSize - at);
      w[(int) (off >>> shift)].get(at, dst, dstOff, n);
      off += n;
      dstOff += n;
      len -= n;
    }
  }

  @Override
  public final void put(long off, byte[] src, int srcOff, int len) {
    checkRange(off, len);
    Objects.checkFromIndexSize(srcOff, len, src.length);
    MappedByteBuffer[] w = windows;
    while (len > 0) {
      int at = (int) (off & mask);
      int n = (int) Math.min(len, windowSize - at);
      w[(int) (off >>> shift)].put(at, src, srcOff, n);
      off += n;
      srcOff += n;
      len -= n;
    }
  }

  /** Calls {@code force(index, len)} on every window piece of {@code [off, off+len)}. */
  final void forceRange(long off, long len) {
    MappedByteBuffer[] w = windows;
    while (len > 0) {
      int at = (int) (off & mask);
      int n = (int) Math.min(len, windowSize - at);
      w[(int) (off >>> shift)].force(at, n);
      off += n;
      len -= n;
    }
  }

  @Override
  public final synchronized void grow(long newLength) throws PoolException {
    long old = length;
    if (newLength < old) {
      throw PoolException.shrink(shown, old, newLength);
    }
    if (newLength == old) {
      return;
    }
    try {
      extendWithZeros(channel, old, newLength);
    } catch (IOException e) {
      throw PoolException.io("extend", shown, e);
    }
    if (durableGrow()) {
      try {
        channel.force(true);
      } catch (IOException e) {
        throw PoolException.io("fsync", shown, e);
      }
      if (!dirSynced) {
        syncDirectory(file, shown);
        dirSynced = true;
      }
    }
    setWindows(remap(windows, old, newLength));
    VarHandle.fullFence();
    length = newLength;
  }

  @Override
  public final synchronized void close() {
    setWindows(new MappedByteBuffer[0]);
    length = 0;
    try {
      channel.close();
    } catch (IOException e) {
      // Nothing is lost: every durable byte was made durable by an earlier drain.
    }
  }

  /**
   * Writes zeros over {@code [from, to)} of the file. Unlike a sparse extension, the blocks are
   * allocated here, so a full disk fails now rather than as a fault on a later store.
   */
  static void extendWithZeros(FileChannel ch, long from, long to) throws IOException {
    ByteBuffer zeros = ByteBuffer.allocateDirect((int) Math.min(ZERO_CHUNK, Math.max(1, to - from)));
    long pos = from;
    while (pos < to) {
      zeros.clear();
      zeros.limit((int) Math.min(zeros.capacity(), to - pos));
      pos += ch.write(zeros, pos);
    }
  }

  /** fsync of the directory holding {@code file}: makes a new name or size-change findable. */
  static void syncDirectory(Path file, String shown) throws PoolException {
    Path dir = file.toAbsolutePath().getParent();
    try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
      d.force(true);
    } catch (IOException e) {
      throw PoolException.io("fsync of directory", shown, e);
    }
  }

  @Override
  public String toString() {
    return kind() + " medium " + shown + " (" + length + " bytes)";
  }
}
