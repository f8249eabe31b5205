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
