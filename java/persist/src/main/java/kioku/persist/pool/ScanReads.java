package kioku.persist.pool;

/**
 * Reads of a whole pool by one thread that passes over it once or twice (recovery's marking,
 * creating and filling), which need not keep what they read mapped: a mapped medium gives a
 * reader with its own read-only mappings of a few small windows, unmapped as it moves on, so
 * the pages it read do not stay in the process's resident set (1 GB of replicas read at
 * recovery would otherwise count 1 GB in the peak RSS on top of the objects rebuilt). Other
 * media read through the medium itself.
 *
 * <p>Only the thread that made the reader uses it (its mappings are unmapped by {@link
 * #close} and when it moves on, and no other thread ever sees them). What it reads is what the
 * medium holds: the mappings are shared, so a store made through the medium is seen.
 */
public interface ScanReads extends AutoCloseable {
  long getLong(long off);

  /** {@code n} words from {@code off} (8-byte aligned) into {@code dst}. */
  void getLongs(long off, long[] dst, int dstOff, int n);

  int getInt(long off);

  short getShort(long off);

  byte getByte(long off);

  void get(long off, byte[] dst, int dstOff, int len);

  /** Unmaps what the reader mapped; the reader must not be used after. */
  @Override
  void close();

  /** Reads through {@code m} itself (its mappings, if any, stay as they are). */
  static ScanReads through(Medium m) {
    return new ScanReads() {
      @Override
      public long getLong(long off) {
        return m.getLong(off);
      }

      @Override
      public void getLongs(long off, long[] dst, int dstOff, int n) {
        m.getLongs(off, dst, dstOff, n);
      }

      @Override
      public int getInt(long off) {
        return m.getInt(off);
      }

      @Override
      public short getShort(long off) {
        return m.getShort(off);
      }

      @Override
      public byte getByte(long off) {
        return m.getByte(off);
      }

      @Override
      public void get(long off, byte[] dst, int dstOff, int len) {
        m.get(off, dst, dstOff, len);
      }

      @Override
      public void close() {}
    };
  }
}
