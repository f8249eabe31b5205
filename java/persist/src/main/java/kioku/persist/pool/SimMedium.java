package kioku.persist.pool;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.BitSet;
import java.util.Objects;
import java.util.OptionalLong;
import java.util.SplittableRandom;

/**
 * Simulated persistent memory for power-cut tests, with the Rust simulator's model:
 *
 * <ul>
 *   <li><b>working memory</b> — a direct buffer that the code under test reads and writes;
 *   <li><b>persisted</b> — what survives a power cut for sure;
 *   <li><b>pending lines</b> — 64-byte lines flushed but not yet drained, each with its content
 *       <i>at the time of the flush</i> (a later store to the line is unflushed again; a line
 *       flushed twice before a drain keeps the later content).
 * </ul>
 *
 * <p>A store reaches persisted only when its line is flushed and a later drain happens. Every
 * {@link #flush} and every {@link #drain} is one ordering point, numbered from 0.
 * {@link #cutPowerAt} cuts the power when a point is reached: that point and every later flush
 * and drain leave the durable side alone (the code under test runs on), and {@link #crash}
 * builds the images the cut could leave. A {@link #grow} before the cut is durable as a size
 * change; after it, it is not part of any image.
 */
public final class SimMedium implements Medium {
  /** The unit of flushing. */
  public static final int LINE = 64;
  /** The failure-atomic unit: an aligned 8-byte store is all or nothing. */
  public static final int WORD = 8;
  /** Most pending lines {@link CrashMode#exhaustive} enumerates (2^16 images). */
  public static final int EXHAUSTIVE_LIMIT = 16;

  /** Replaced on grow; volatile so that readers on other threads see the new one whole. */
  private volatile ByteBuffer working;

  // The durable side and the power switch, guarded by this.
  private byte[] persisted;
  /** For pending lines, their content at flush time; other bytes are meaningless. */
  private byte[] flushed;
  private final BitSet pending = new BitSet();
  private long points;
  private long cutAt = -1;
  private Cut cut;
  private Runnable onCut;

  /** The moment the power was cut, with working memory then (for evictUnflushed). */
  private record Cut(long point, byte[] working) {}

  private SimMedium(byte[] image) {
    working = ByteBuffer.allocateDirect(image.length).order(ByteOrder.LITTLE_ENDIAN);
    working.put(0, image);
    persisted = image.clone();
    flushed = new byte[image.length];
  }

  /** A zero-filled medium of {@code len} bytes (working and durable sides equal). */
  public static SimMedium create(long len) {
    return new SimMedium(new byte[checkedLength(len)]);
  }

  /** A medium whose working and durable sides both start as {@code image} (a crash image). */
  public static SimMedium fromImage(byte[] image) {
    return new SimMedium(image);
  }

  /** A medium started from an image file (written by {@link #saveImage}: raw bytes). */
  public static SimMedium load(Path path) throws PoolException {
    try {
      return new SimMedium(Files.readAllBytes(path));
    } catch (IOException e) {
      throw PoolException.io("read", path.toString(), e);
    }
  }

  /** Writes an image to {@code path} (raw bytes, fsynced) for another process to load. */
  public static void saveImage(Path path, byte[] image) throws PoolException {
    try (FileChannel ch = FileChannel.open(path, StandardOpenOption.CREATE,
        StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING)) {
      ByteBuffer b = ByteBuffer.wrap(image);
      while (b.hasRemaining()) {
        ch.write(b);
      }
      ch.force(true);
    } catch (IOException e) {
      throw PoolException.io("write", path.toString(), e);
    }
  }

  private static int checkedLength(long len) {
    if (len < 0 || len > Integer.MAX_VALUE - 8) {
      throw new IllegalArgumentException(
          "a simulated medium holds at most 2 GiB; " + len + " bytes asked");
    }
    return (int) len;
  }

  // ---- the power switch --------------------------------------------------------------------

  /** Ordering points (flush and drain calls) so far, including any after the power cut. */
  public synchronized long orderingPoints() {
    return points;
  }

  /**
   * Cuts the power when ordering point {@code n} is reached: that point and every later flush
   * or drain leave the durable side alone. If {@code n} has passed, the next point cuts. No
   * effect once the power is cut.
   */
  public synchronized void cutPowerAt(long n) {
    cutAt = n;
  }

  /** Cuts the power now, between ordering points: the cut is numbered with the next point. */
  public synchronized void cutPowerNow() {
    if (cut == null) {
      cut = new Cut(points, workingCopy());
    }
  }

  /**
   * Runs {@code action} once, on the thread that reaches the cut, at the moment the power is cut
   * by {@link #cutPowerAt} (child-process tests save an image and halt the JVM there).
   */
  public synchronized void setOnCut(Runnable action) {
    onCut = action;
  }

  /** The ordering point at which the power was cut, if it was. */
  public synchronized OptionalLong powerCutPoint() {
    return cut == null ? OptionalLong.empty() : OptionalLong.of(cut.point());
  }

  /** Lines flushed but not drained (at the cut, if the power is cut). */
  public synchronized int pendingLines() {
    return pending.cardinality();
  }

  /** The bytes that survive for sure: drained data only. */
  public synchronized byte[] persisted() {
    return persisted.clone();
  }

  /** The working memory as stores left it (now, not at the cut). */
  public byte[] working() {
    return workingCopy();
  }

  /** Counts one ordering point, cutting the power if due; true when the point may act. */
  private boolean orderingPoint() {
    long point = points++;
    if (cut == null && cutAt >= 0 && point >= cutAt) {
      cut = new Cut(point, workingCopy());
      Runnable action = onCut;
      onCut = null;
      if (action != null) {
        action.run();
      }
    }
    return cut == null;
  }

  private byte[] workingCopy() {
    ByteBuffer w = working;
    byte[] b = new byte[w.capacity()];
    w.get(0, b);
    return b;
  }

  // ---- crash images ------------------------------------------------------------------------

  /**
   * One image the power cut (or a cut now, if there was none) could leave; as long as the
   * medium was at the cut.
   */
  public synchronized byte[] crash(CrashMode mode) {
    byte[] image = persisted.clone();
    if (mode instanceof CrashMode.DrainedOnly) {
      return image;
    } else if (mode instanceof CrashMode.AllFlushed) {
      pending.stream().forEach(line -> copyLine(flushed, image, line));
      return image;
    } else if (mode instanceof CrashMode.Exhaustive e) {
      int[] lines = pending.stream().toArray();
      if (lines.length > EXHAUSTIVE_LIMIT) {
        throw new IllegalStateException(lines.length + " cache lines are flushed but not"
            + " drained; exhaustive crash images need at most " + EXHAUSTIVE_LIMIT
            + " (use a random crash mode instead)");
      }
      if (e.index() < 0 || e.index() >= 1L << lines.length) {
        throw new IllegalArgumentException("crash image " + e.index() + " does not exist;"
            + " there are " + (1L << lines.length));
      }
      for (int bit = 0; bit < lines.length; bit++) {
        if ((e.index() & 1L << bit) != 0) {
          copyLine(flushed, image, lines[bit]);
        }
      }
      return image;
    } else if (mode instanceof CrashMode.Random r) {
      SplittableRandom rng = new SplittableRandom(r.seed());
      pending.stream().forEach(line -> takeSome(rng, r.tearWords(), flushed, image, line));
      if (r.evictUnflushed()) {
        byte[] now = cut != null ? cut.working() : workingCopy();
        int lines = (image.length + LINE - 1) / LINE;
        for (int line = 0; line < lines; line++) {
          byte[] written = pending.get(line) ? flushed : persisted;
          int start = line * LINE;
          int end = Math.min(start + LINE, image.length);
          if (!Arrays.equals(now, start, end, written, start, end)) {
            takeSome(rng, r.tearWords(), now, image, line);
          }
        }
      }
      return image;
    }
    throw new IllegalArgumentException("unknown crash mode " + mode);
  }

  private static void copyLine(byte[] from, byte[] to, int line) {
    int start = line * LINE;
    System.arraycopy(from, start, to, start, Math.min(LINE, to.length - start));
  }

  /** Copies line {@code line} of {@code from} into {@code to}: whole (p = 1/2) or per word. */
  private static void takeSome(
      SplittableRandom rng, boolean tearWords, byte[] from, byte[] to, int line) {
    int start = line * LINE;
    int end = Math.min(start + LINE, to.length);
    if (tearWords) {
      for (int w = start; w < end; w += WORD) {
        if (rng.nextBoolean()) {
          System.arraycopy(from, w, to, w, Math.min(WORD, end - w));
        }
      }
    } else if (rng.nextBoolean()) {
      System.arraycopy(from, start, to, start, end - start);
    }
  }

  // ---- Medium ------------------------------------------------------------------------------

  @Override
  public MediumKind kind() {
    return MediumKind.SIM;
  }

  @Override
  public long length() {
    return working.capacity();
  }

  @Override
  public String durability() {
    return MediumKind.SIM.durability();
  }

  private static int at(long off) {
    int i = (int) off;
    if (i != off) {
      throw new IndexOutOfBoundsException("offset " + off + " is outside the medium");
    }
    return i;
  }

  @Override
  public long getLong(long off) {
    return working.getLong(at(off));
  }

  @Override
  public void putLong(long off, long value) {
    working.putLong(at(off), value);
  }

  @Override
  public int getInt(long off) {
    return working.getInt(at(off));
  }

  @Override
  public void putInt(long off, int value) {
    working.putInt(at(off), value);
  }

  @Override
  public short getShort(long off) {
    return working.getShort(at(off));
  }

  @Override
  public void putShort(long off, short value) {
    working.putShort(at(off), value);
  }

  @Override
  public byte getByte(long off) {
    return working.get(at(off));
  }

  @Override
  public void putByte(long off, byte value) {
    working.put(at(off), value);
  }

  @Override
  public void get(long off, byte[] dst, int dstOff, int len) {
    working.get(at(off), dst, dstOff, len);
  }

  @Override
  public void put(long off, byte[] src, int srcOff, int len) {
    working.put(at(off), src, srcOff, len);
  }

  /** Snapshots the lines covering the range as pending; one ordering point. */
  @Override
  public synchronized void flush(long off, long len) {
    Objects.checkFromIndexSize(off, len, length());
    if (!orderingPoint() || len == 0) {
      return;
    }
    int first = (int) (off / LINE);
    int last = (int) ((off + len - 1) / LINE);
    int start = first * LINE;
    int end = Math.min((last + 1) * LINE, persisted.length);
    working.get(start, flushed, start, end - start);
    pending.set(first, last + 1);
  }

  /** Makes every pending line's flushed content persisted; one ordering point. */
  @Override
  public synchronized void drain() {
    if (!orderingPoint()) {
      return;
    }
    pending.stream().forEach(line -> copyLine(flushed, persisted, line));
    pending.clear();
  }

  private long maxLength = Integer.MAX_VALUE - 8;

  /** For tests: the medium cannot grow past {@code max} bytes, as on a full disk. */
  public synchronized void limitLength(long max) {
    maxLength = Math.min(max, Integer.MAX_VALUE - 8);
  }

  @Override
  public synchronized void grow(long newLength) throws PoolException {
    long old = length();
    if (newLength < old) {
      throw PoolException.shrink("(simulated medium)", old, newLength);
    }
    if (newLength > maxLength) {
      throw PoolException.tooLong("(simulated medium)", newLength, maxLength);
    }
    if (newLength == old) {
      return;
    }
    ByteBuffer w = ByteBuffer.allocateDirect((int) newLength).order(ByteOrder.LITTLE_ENDIAN);
    w.put(0, working, 0, (int) old);
    working = w;
    // A size change is durable at once (as a file's fsynced size) unless the power is cut.
    if (cut == null) {
      persisted = Arrays.copyOf(persisted, (int) newLength);
      flushed = Arrays.copyOf(flushed, (int) newLength);
    }
  }

  /** Nothing to release: the simulator's state lives on the heap. */
  @Override
  public void close() {}

  @Override
  public String toString() {
    return "sim medium (" + length() + " bytes, " + orderingPoints() + " ordering points)";
  }
}
