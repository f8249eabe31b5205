package kioku.persist.pool;

import java.io.IOException;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.LongBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.util.Arrays;
import sun.misc.Unsafe;

/**
 * {@link ScanReads} of a mapped medium: read-only mappings of 4 MiB windows of the pool file,
 * mapped as the reader reaches them, at most 8 at a time (the oldest unmapped first; fewer
 * when several readers scan at once, so that together they keep as much mapped as one). What lies
 * past the file's length when the reader was made, and everything if a window cannot be
 * mapped, is read through the medium.
 *
 * <p>A reader whose reads do not follow the file's order (a heap whose graph was relinked
 * long after its replicas were placed: following references jumps between windows) would map
 * a window for almost every replica, each a mapping, its page faults and an unmapping (a 0.1
 * GB heap took 36 s of CPU instead of 0.8). So once it has mapped {@link #REMAPS} times as
 * many windows as the file has, plus a few, it unmaps them and reads through the medium from
 * then on: the pages it reads stay resident until the pool is closed, as they would without
 * a reader, instead of the scan's time growing with the number of replicas times a mapping.
 */
final class WindowedScan implements ScanReads {
  private static final int SHIFT = 22;
  private static final long SIZE = 1L << SHIFT;
  private static final long MASK = SIZE - 1;
  /** Windows kept mapped by a reader alone. */
  static final int KEPT = 8;
  /** Mappings per window of the file past which the reader reads through the medium. */
  static final int REMAPS = 4;
  private static final Unsafe UNSAFE = unsafe();

  private final MappedMedium medium;
  private final FileChannel channel;
  private final long length;
  private final ByteBuffer[] windows;
  private final LongBuffer[] views;
  /** The windows mapped now, oldest at {@link #next} once the ring is full; -1 = free. */
  private final int[] ring;
  private int next;
  private boolean failed;
  /** Windows mapped so far, and how many the reader may map before it reads the medium. */
  private long mappings;

  private final long mappingLimit;

  WindowedScan(MappedMedium medium, FileChannel channel, long length, int kept) {
    this.medium = medium;
    this.ring = new int[Math.max(1, kept)];
    this.channel = channel;
    this.length = length;
    int n = (int) ((length + MASK) >>> SHIFT);
    this.windows = new ByteBuffer[n];
    this.views = new LongBuffer[n];
    Arrays.fill(ring, -1);
    this.mappingLimit = (long) REMAPS * n + 2 * KEPT;
  }

  /** Whether the reader has given up its windows and reads through the medium. */
  boolean throughMedium() {
    return failed;
  }

  private static Unsafe unsafe() {
    try {
      Field f = Unsafe.class.getDeclaredField("theUnsafe");
      f.setAccessible(true);
      return (Unsafe) f.get(null);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /** The window holding {@code [off, off+len)}, mapped if need be; null: read the medium. */
  private ByteBuffer window(long off, long len) {
    if (off < 0 || off + len > length || failed) return null;
    int w = (int) (off >>> SHIFT);
    if (((off + len - 1) >>> SHIFT) != w) return null; // straddles two windows
    ByteBuffer b = windows[w];
    return b != null ? b : map(w);
  }

  private ByteBuffer map(int w) {
    if (++mappings > mappingLimit) {
      // Reads out of the file's order: a mapping per read would cost far more than the
      // resident pages the medium's own mapping keeps (see the class comment).
      close();
      failed = true;
      return null;
    }
    int old = ring[next];
    if (old >= 0) unmap(old);
    long start = (long) w << SHIFT;
    MappedByteBuffer b;
    try {
      b = channel.map(FileChannel.MapMode.READ_ONLY, start, Math.min(SIZE, length - start));
    } catch (IOException | RuntimeException e) {
      failed = true; // e.g. out of mappings: read through the medium, as without a reader
      return null;
    }
    b.order(ByteOrder.LITTLE_ENDIAN);
    windows[w] = b;
    views[w] = b.asLongBuffer();
    ring[next] = w;
    next = (next + 1) % ring.length;
    return b;
  }

  private void unmap(int w) {
    ByteBuffer b = windows[w];
    windows[w] = null;
    views[w] = null;
    // Unmapped now rather than when a GC finds the buffer unreachable (which is what keeps
    // the pages resident): only this reader ever held the buffer and its view, and both are
    // dropped above, so nothing can read the unmapped range.
    UNSAFE.invokeCleaner(b);
  }

  @Override
  public long getLong(long off) {
    ByteBuffer b = window(off, 8);
    return b == null ? medium.getLong(off) : b.getLong((int) (off & MASK));
  }

  @Override
  public void getLongs(long off, long[] dst, int dstOff, int n) {
    while (n > 0) {
      // The words up to the end of the window holding off (all, if they fit).
      int k = (int) Math.min(n, (SIZE - (off & MASK)) >>> 3);
      ByteBuffer b = (off & 7) == 0 && k > 0 ? window(off, 8L * k) : null;
      if (b == null) {
        for (int i = 0; i < n; i++) dst[dstOff + i] = getLong(off + 8L * i);
        return;
      }
      views[(int) (off >>> SHIFT)].get((int) ((off & MASK) >>> 3), dst, dstOff, k);
      off += 8L * k;
      dstOff += k;
      n -= k;
    }
  }

  @Override
  public int getInt(long off) {
    ByteBuffer b = window(off, 4);
    return b == null ? medium.getInt(off) : b.getInt((int) (off & MASK));
  }

  @Override
  public short getShort(long off) {
    ByteBuffer b = window(off, 2);
    return b == null ? medium.getShort(off) : b.getShort((int) (off & MASK));
  }

  @Override
  public byte getByte(long off) {
    ByteBuffer b = window(off, 1);
    return b == null ? medium.getByte(off) : b.get((int) (off & MASK));
  }

  @Override
  public void get(long off, byte[] dst, int dstOff, int len) {
    while (len > 0) {
      int k = (int) Math.min(len, SIZE - (off & MASK)); // up to the end of off's window
      ByteBuffer b = window(off, k);
      if (b == null) {
        medium.get(off, dst, dstOff, len);
        return;
      }
      b.get((int) (off & MASK), dst, dstOff, k);
      off += k;
      dstOff += k;
      len -= k;
    }
  }

  @Override
  public void close() {
    for (int i = 0; i < ring.length; i++) {
      if (ring[i] >= 0) unmap(ring[i]);
      ring[i] = -1;
    }
  }
}
