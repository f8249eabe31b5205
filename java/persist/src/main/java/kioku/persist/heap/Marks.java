package kioku.persist.heap;

/**
 * The replicas a mark found live: one bit per 8 bytes of each heap space, then a rank
 * directory, so that live replicas are numbered 0..count-1 in address order and an address
 * turns into its number in O(1). Recovery keeps its objects in one array indexed by that
 * number, and walks the heap in address order (sequential reads of the medium).
 */
final class Marks {
  private final long[][] bits; // per space
  private int[][] rankBase; // per space: live replicas before each 64-bit word
  private int[] spaceBase; // live replicas before each space
  private int count;
  /** Class ids of the marked replicas (set by the marking), or null if not recorded. */
  private boolean[] classes;
  /** Per chunk of {@link #forEachIn}: its space (chunks of a space are consecutive). */
  private int[] chunkSpace;
  private int[] chunkFirstWord;

  Marks(HeapSpace space) {
    bits = new long[space.spaces()][];
    for (int s = 1; s < bits.length; s++) bits[s] = new long[(int) ((space.spaceLength(s) / 8 + 63) / 64)];
  }

  /** Marks a replica; false if it was already marked. */
  boolean mark(long addr) {
    long[] b = bits[HeapFormat.space(addr)];
    long word = HeapFormat.offset(addr) >>> 3;
    int w = (int) (word >>> 6);
    long bit = 1L << word;
    if ((b[w] & bit) != 0) return false;
    b[w] |= bit;
    count++;
    return true;
  }

  boolean contains(long addr) {
    int s = HeapFormat.space(addr);
    if (s <= 0 || s >= bits.length) return false;
    long word = HeapFormat.offset(addr) >>> 3;
    int w = (int) (word >>> 6);
    return w < bits[s].length && (bits[s][w] & (1L << word)) != 0;
  }

  int count() {
    return count;
  }

  /** Records the class ids the marked replicas name (indexed by id). */
  void classes(boolean[] used) {
    this.classes = used;
  }

  /** Whether a marked replica names class {@code cid}; true for all if none were recorded. */
  boolean usesClass(int cid) {
    return classes == null || (cid < classes.length && classes[cid]);
  }

  /** The highest class id a marked replica may name (recorded), or -1 if none recorded. */
  int maxClass() {
    return classes == null ? -1 : classes.length - 1;
  }

  /** Builds the rank directory; call once marking is done. */
  void rank() {
    rankBase = new int[bits.length][];
    spaceBase = new int[bits.length];
    int total = 0;
    for (int s = 1; s < bits.length; s++) {
      spaceBase[s] = total;
      long[] b = bits[s];
      int[] r = new int[b.length];
      int n = 0;
      for (int w = 0; w < b.length; w++) {
        r[w] = n;
        n += Long.bitCount(b[w]);
      }
      rankBase[s] = r;
      total += n;
    }
    int chunks = 0;
    for (int s = 1; s < bits.length; s++) chunks += (bits[s].length + CHUNK_WORDS - 1) / CHUNK_WORDS;
    chunkSpace = new int[chunks];
    chunkFirstWord = new int[chunks];
    int c = 0;
    for (int s = 1; s < bits.length; s++) {
      for (int w = 0; w < bits[s].length; w += CHUNK_WORDS) {
        chunkSpace[c] = s;
        chunkFirstWord[c++] = w;
      }
    }
  }

  /** Words of the bitmap per chunk: 4 MiB of heap space. */
  static final int CHUNK_WORDS = 8192;

  /** How many chunks {@link #forEachIn} takes (after {@link #rank}). */
  int chunks() {
    return chunkSpace.length;
  }

  /**
   * The marked replicas of one chunk of the heap's address range (after {@link #rank}), in
   * address order, with their numbers: the chunks in order visit what {@link #forEach} does.
   */
  void forEachIn(int chunk, Visitor v) throws HeapException {
    int s = chunkSpace[chunk];
    long[] b = bits[s];
    int from = chunkFirstWord[chunk];
    int to = Math.min(b.length, from + CHUNK_WORDS);
    int i = spaceBase[s] + rankBase[s][from];
    for (int w = from; w < to; w++) {
      long x = b[w];
      while (x != 0) {
        int bit = Long.numberOfTrailingZeros(x);
        x &= x - 1;
        v.visit(i++, HeapFormat.address(s, (((long) w << 6) + bit) << 3));
      }
    }
  }

  /** The number of a marked replica (after {@link #rank}). */
  int index(long addr) {
    int s = HeapFormat.space(addr);
    long word = HeapFormat.offset(addr) >>> 3;
    int w = (int) (word >>> 6);
    long below = bits[s][w] & ((1L << word) - 1); // shifts use the low 6 bits of word
    return spaceBase[s] + rankBase[s][w] + Long.bitCount(below);
  }

  interface Visitor {
    void visit(int index, long addr) throws HeapException;
  }

  /** Every marked replica in address order, with its number. */
  void forEach(Visitor v) throws HeapException {
    int i = 0;
    for (int s = 1; s < bits.length; s++) {
      long[] b = bits[s];
      for (int w = 0; w < b.length; w++) {
        long x = b[w];
        while (x != 0) {
          int bit = Long.numberOfTrailingZeros(x);
          x &= x - 1;
          v.visit(i++, HeapFormat.address(s, (((long) w << 6) + bit) << 3));
        }
      }
    }
  }
}
