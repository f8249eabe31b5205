package kioku.persist.pool;

/**
 * A pool file's bytes and how a store to them becomes durable (docs/media.md: the same four
 * media as the Rust side). Addressed by file offset. A single aligned 8-byte store is
 * failure-atomic; after {@code flush} of a range and a later {@code drain}, every byte stored
 * to the range before the flush is durable.
 */
public interface Medium extends AutoCloseable {
  MediumKind kind();

  /** Current length in bytes. */
  long length();

  /** One line on what survives what, for logs ("survives power loss", ...). */
  String durability();

  long getLong(long off);

  /**
   * {@code n} consecutive 8-byte words from {@code off} into {@code dst[dstOff..]}: what a loop
   * of {@link #getLong} gives, in one range check and one copy where the medium can (recovery
   * reads every replica this way).
   */
  default void getLongs(long off, long[] dst, int dstOff, int n) {
    for (int i = 0; i < n; i++) dst[dstOff + i] = getLong(off + 8L * i);
  }

  void putLong(long off, long value);

  int getInt(long off);

  void putInt(long off, int value);

  short getShort(long off);

  void putShort(long off, short value);

  byte getByte(long off);

  void putByte(long off, byte value);

  void get(long off, byte[] dst, int dstOff, int len);

  /**
   * A reader for one thread passing over the pool (recovery), whose pages need not stay
   * mapped: see {@link ScanReads}. By default it reads through this medium.
   */
  default ScanReads scanReads() {
    return ScanReads.through(this);
  }

  /**
   * A reader for one of {@code readers} threads passing over parts of the pool at once: a
   * mapped medium's readers then keep fewer windows each, so that together they keep no more
   * mapped than one reader alone.
   */
  default ScanReads scanReads(int readers) {
    return scanReads();
  }

  void put(long off, byte[] src, int srcOff, int len);

  /** Start writing back {@code [off, off+len)}; unordered until {@link #drain}. */
  void flush(long off, long len);

  /** Wait until everything flushed before is durable (a fence). */
  void drain();

  default void persist(long off, long len) {
    flush(off, len);
    drain();
  }

  /**
   * Whether a store survives what this medium survives as soon as it is made, in the order the
   * program made it: then {@link #flush} and {@link #drain} only have to keep stores in order
   * (shm: the file's pages are the memory, and a killed process's stores still reach them in
   * order). A caller that orders several stores may then skip the drain between them, as long
   * as it keeps the compiler from reordering them ({@code VarHandle.storeStoreFence}).
   */
  default boolean durableInStoreOrder() {
    return false;
  }

  /**
   * The native address of {@code [off, off+len)} where the medium is memory this process maps
   * and the range lies in one mapping, for code that reads and writes a few words many times
   * (a durable store into a replica); 0 otherwise, and once closed. The address stays valid
   * while the medium is reachable: the caller must keep it so
   * ({@code java.lang.ref.Reference.reachabilityFence}) until it has made its last access.
   * Words there are little-endian, as everywhere in the pool.
   */
  default long address(long off, long len) {
    return 0;
  }

  /** Extend with zeros, durably. Existing offsets stay valid. */
  void grow(long newLength) throws PoolException;

  @Override
  void close();
}
