package kioku.persist.heap;

import kioku.persist.pool.Medium;

/**
 * Heap addresses over the pool's medium: space 0 is persist.meta, space k is heap.(k-1). A
 * read or write of a replica is one array lookup and one medium access.
 */
final class HeapSpace {
  final Medium medium;
  private volatile long[] base = new long[0];
  private volatile long[] length = new long[0];

  HeapSpace(Medium medium) {
    this.medium = medium;
  }

  /** Adds (or re-adds at open) the extent of space {@code index}. */
  synchronized void map(int index, long offset, long len) {
    long[] b = base;
    long[] l = length;
    if (index >= b.length) {
      b = java.util.Arrays.copyOf(b, index + 1);
      l = java.util.Arrays.copyOf(l, index + 1);
    }
    b[index] = offset;
    l[index] = len;
    length = l;
    base = b;
  }

  int spaces() {
    return base.length;
  }

  long spaceLength(int index) {
    return length[index];
  }

  /** The medium offset of a heap address. */
  long off(long addr) {
    return base[HeapFormat.space(addr)] + HeapFormat.offset(addr);
  }

  /** True if [addr, addr+len) lies inside one mapped heap space (not meta). */
  boolean valid(long addr, long len) {
    int s = HeapFormat.space(addr);
    long o = HeapFormat.offset(addr);
    long[] l = length;
    return s >= 1 && s < l.length && (o & 7) == 0 && len >= 0 && o + len <= l[s];
  }

  /** {@link Medium#address} of {@code [addr, addr+len)}; 0 if there is none. */
  long address(long addr, long len) {
    return medium.address(off(addr), len);
  }

  long getLong(long addr) {
    return medium.getLong(off(addr));
  }

  void putLong(long addr, long v) {
    medium.putLong(off(addr), v);
  }

  int getInt(long addr) {
    return medium.getInt(off(addr));
  }

  void flush(long addr, long len) {
    medium.flush(off(addr), len);
  }

  void drain() {
    medium.drain();
  }

  /** A flush and a drain of one range (one fence on media where they are the same). */
  void persist(long addr, long len) {
    medium.persist(off(addr), len);
  }
}
