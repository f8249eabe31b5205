package kioku.persist.heap;

/**
 * The byte layout of a Java persistent heap inside a kioku pool (pool kind {@link #KIND});
 * docs/persist.md describes it in full. All integers little-endian.
 *
 * <p>Sections: {@code persist.meta} (this header and the root table), {@code persist.classes}
 * (the class-descriptor log), {@code persist.log} (undo logs of failure-atomic sections) and
 * {@code heap.0}, {@code heap.1}, ... (replicas). A heap address is {@code space << 32 |
 * offset}: space 0 is persist.meta, space k is heap.(k-1); address 0 is null.
 */
final class HeapFormat {
  private HeapFormat() {}

  static final String KIND = "kioku.persist";
  static final String META = "persist.meta";
  static final String CLASSES = "persist.classes";
  static final String LOG = "persist.log";
  static final String HEAP_PREFIX = "heap.";

  /** "KIOKUJVM" as a little-endian u64. */
  static final long MAGIC = 0x4d564a554b4f494bL;

  /**
   * 2: replica check words, self-checking counts and roots, growable undo logs. 3: S2 is a sum
   * modulo the prime 2^64 - 59 with pseudo-random weights (it was modulo 2^64 with weights
   * 2p + 1, under which some damage to two words cancelled); a version-2 pool is refused.
   */
  static final int VERSION = 3;

  // persist.meta header. The fields written once (magic to chunk, log geometry) are covered by
  // a CRC-32C; the two counts, which change, are self-checking (u32 n, then u32 ~n).
  static final int M_MAGIC = 0;
  static final int M_VERSION = 8;
  static final int M_SEGMENT = 12;
  static final int M_CHUNK = 16;
  static final int M_CLASS_COUNT = 24;
  static final int M_ROOT_COUNT = 32;
  static final int M_LOG_SLOTS = 40;
  static final int M_LOG_SLOT_BYTES = 44;
  static final int M_CRC = 48; // u32 CRC-32C of bytes 0..24 and 40..48

  // The root table: fixed entries after the first page.
  static final int ROOTS_OFF = 4096;
  static final int ROOT_ENTRY = 256;
  static final int ROOT_VALUE = 0; // u64 heap address of the root's replica (0 = null)
  static final int ROOT_CHECK = 8; // u64 check of the name and the value (RootTable.check)
  static final int ROOT_NAME_LEN = 16; // u16
  static final int ROOT_NAME = 18; // "binary.ClassName#field", UTF-8
  static final int ROOT_NAME_MAX = ROOT_ENTRY - ROOT_NAME;
  static final int MAX_ROOTS = 1024;
  static final long META_LEN = ROOTS_OFF + (long) MAX_ROOTS * ROOT_ENTRY;

  // A replica: a 24-byte header, then the body.
  //   header: u32 class id, u32 count (body words, array length or string bytes),
  //           then the check words S1 and S2 (ReplicaCheck)
  //   object: count 8-byte slots in layout order (references hold heap addresses)
  //   array:  elements packed at their natural size (references 8 bytes)
  //   string: u8 coder, then count bytes (Latin-1 or UTF-16LE, as java.lang.String holds them)
  //   enum:   the constant's ordinal in its descriptor, then its mutable fields' slots
  //   canonical: a JDK-shared instance (Boolean.TRUE, a cached Integer, Collections.EMPTY_LIST):
  //           the boxed value, or nothing
  static final int HEADER = 24;

  // Class-descriptor log records: u32 payload length, u32 CRC-32C of the payload, payload,
  // padded to 8 bytes. Class ids are 1-based record numbers.
  static final int RECORD_HEADER = 8;

  static final long DEFAULT_CHUNK = 64L << 20;
  static final long CLASSES_LEN = 1L << 20;

  /** A count stored as u32 n and u32 ~n: one 8-byte store, and a flipped bit shows. */
  static long countWord(long n) {
    return (n & 0xffffffffL) | (~n << 32);
  }

  /** The count of a count word, or -1 if it does not check. */
  static long count(long word) {
    long n = word & 0xffffffffL;
    return (word >>> 32) == (~n & 0xffffffffL) ? n : -1;
  }

  static int space(long addr) {
    return (int) (addr >>> 32);
  }

  static long offset(long addr) {
    return addr & 0xffffffffL;
  }

  static long address(int space, long offset) {
    return ((long) space << 32) | offset;
  }
}
