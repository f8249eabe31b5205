package kioku.persist.heap;

import java.util.ArrayList;
import java.util.List;

/**
 * Space for replicas (the thesis's NVM allocator). Small replicas go to 4 KiB segments of one
 * size class; larger ones take runs of whole segments. All of this metadata lives in DRAM
 * only: at open it is rebuilt from the replicas reachable from the roots, which is why a
 * replica becomes reachable only after it is durable. Not thread-safe: the heap calls it under
 * its persistence lock.
 */
final class Allocator {
  private static final byte FREE = 0;
  private static final byte LARGE_HEAD = 0x7f;
  private static final byte LARGE_BODY = 0x7e;

  /** One heap space's segments. */
  private static final class Chunk {
    final int space;
    final byte[] kind; // FREE, a size class, LARGE_HEAD or LARGE_BODY
    final int[] runLength; // segments of a large replica, at its head
    final long[] freeSlots; // per small segment: 64 bits per word, 8 words (512 slots max)
    final int[] freeCount;
    int freeSegments;
    int rover;

    Chunk(int space, long len) {
      this.space = space;
      int n = (int) (len / SizeClasses.SEGMENT);
      kind = new byte[n];
      runLength = new int[n];
      freeSlots = new long[n * 8];
      freeCount = new int[n];
      freeSegments = n;
    }
  }

  private final List<Chunk> chunks = new ArrayList<>();
  /**
   * Per size class: segments (space << 32 | segment) that may have free slots, as a stack.
   * Plain arrays, not JDK collections, which are instrumented.
   */
  private final long[][] partial = new long[SizeClasses.COUNT + 1][];

  private final int[] partialCount = new int[SizeClasses.COUNT + 1];

  private void pushPartial(int sc, long ref) {
    if (partialCount[sc] == partial[sc].length) {
      partial[sc] = java.util.Arrays.copyOf(partial[sc], partialCount[sc] * 2);
    }
    partial[sc][partialCount[sc]++] = ref;
  }

  private long usedBytes;

  Allocator() {
    for (int c = 1; c <= SizeClasses.COUNT; c++) partial[c] = new long[16];
  }

  /** Adds an empty heap space (at creation, growth, or open before rebuilding). */
  void addChunk(int space, long len) {
    while (chunks.size() <= space) chunks.add(null);
    chunks.set(space, new Chunk(space, len));
  }

  long usedBytes() {
    return usedBytes;
  }

  long capacityBytes() {
    long n = 0;
    for (Chunk c : chunks) if (c != null) n += (long) c.kind.length * SizeClasses.SEGMENT;
    return n;
  }

  /** A replica of {@code size} bytes (a multiple of 8), or 0 if no space has room. */
  long allocate(long size) {
    if (size <= SizeClasses.MAX_SMALL) return allocateSmall(SizeClasses.classOf(size));
    int segs = (int) ((size + SizeClasses.SEGMENT - 1) / SizeClasses.SEGMENT);
    for (Chunk c : chunks) {
      if (c == null || c.freeSegments < segs) continue;
      int head = findRun(c, segs);
      if (head >= 0) {
        c.kind[head] = LARGE_HEAD;
        for (int i = 1; i < segs; i++) c.kind[head + i] = LARGE_BODY;
        c.runLength[head] = segs;
        c.freeSegments -= segs;
        usedBytes += (long) segs * SizeClasses.SEGMENT;
        return HeapFormat.address(c.space, (long) head * SizeClasses.SEGMENT);
      }
    }
    return 0;
  }

  private long allocateSmall(int sc) {
    while (true) {
      if (partialCount[sc] == 0) {
        if (!newSegment(sc)) return 0;
        continue;
      }
      long ref = partial[sc][partialCount[sc] - 1];
      Chunk c = chunks.get((int) (ref >>> 32));
      int seg = (int) ref;
      if (c.kind[seg] != sc || c.freeCount[seg] == 0) {
        partialCount[sc]--; // stale: the segment filled up or was freed
        continue;
      }
      int slot = takeSlot(c, seg);
      if (c.freeCount[seg] == 0) partialCount[sc]--;
      usedBytes += SizeClasses.size(sc);
      return HeapFormat.address(
          c.space, (long) seg * SizeClasses.SEGMENT + (long) slot * SizeClasses.size(sc));
    }
  }

  private boolean newSegment(int sc) {
    for (Chunk c : chunks) {
      if (c == null || c.freeSegments == 0) continue;
      int seg = findRun(c, 1);
      if (seg < 0) continue;
      formatSegment(c, seg, sc);
      pushPartial(sc, ((long) c.space << 32) | seg);
      return true;
    }
    return false;
  }

  private static void formatSegment(Chunk c, int seg, int sc) {
    c.kind[seg] = (byte) sc;
    int slots = SizeClasses.slotsPerSegment(sc);
    for (int w = 0; w < 8; w++) {
      int bits = Math.max(0, Math.min(64, slots - w * 64));
      c.freeSlots[seg * 8 + w] = bits == 64 ? -1L : (1L << bits) - 1;
    }
    c.freeCount[seg] = slots;
    c.freeSegments--;
  }

  private static int takeSlot(Chunk c, int seg) {
    for (int w = 0; w < 8; w++) {
      long bits = c.freeSlots[seg * 8 + w];
      if (bits != 0) {
        int b = Long.numberOfTrailingZeros(bits);
        c.freeSlots[seg * 8 + w] = bits & ~(1L << b);
        c.freeCount[seg]--;
        return w * 64 + b;
      }
    }
    throw new IllegalStateException("segment has no free slot");
  }

  private static int findRun(Chunk c, int segs) {
    int n = c.kind.length;
    for (int pass = 0; pass < 2; pass++) {
      int start = pass == 0 ? c.rover : 0;
      int end = pass == 0 ? n : Math.min(n, c.rover + segs);
      int run = 0;
      for (int i = start; i < end; i++) {
        if (c.kind[i] == FREE) {
          if (++run == segs) {
            c.rover = i + 1 < n ? i + 1 : 0;
            return i - segs + 1;
          }
        } else {
          run = 0;
        }
      }
    }
    return -1;
  }

  /** Frees a replica of {@code size} bytes at {@code addr}. */
  void free(long addr, long size) {
    Chunk c = chunks.get(HeapFormat.space(addr));
    long off = HeapFormat.offset(addr);
    int seg = (int) (off / SizeClasses.SEGMENT);
    byte k = c.kind[seg];
    if (k == LARGE_HEAD) {
      int segs = c.runLength[seg];
      for (int i = 0; i < segs; i++) c.kind[seg + i] = FREE;
      c.freeSegments += segs;
      usedBytes -= (long) segs * SizeClasses.SEGMENT;
      return;
    }
    int sc = k;
    int slot = (int) ((off % SizeClasses.SEGMENT) / SizeClasses.size(sc));
    c.freeSlots[seg * 8 + slot / 64] |= 1L << (slot % 64);
    c.freeCount[seg]++;
    usedBytes -= SizeClasses.size(sc);
    if (c.freeCount[seg] == SizeClasses.slotsPerSegment(sc)) {
      c.kind[seg] = FREE;
      c.freeSegments++;
    } else if (c.freeCount[seg] == 1) {
      pushPartial(sc, ((long) c.space << 32) | seg);
    }
  }

  /**
   * Rebuilding after open or GC: forget everything, then {@link #markUsed} every live replica,
   * then {@link #finishRebuild}.
   */
  void beginRebuild() {
    for (int i = 0; i < chunks.size(); i++) {
      Chunk c = chunks.get(i);
      if (c != null) addChunk(i, (long) c.kind.length * SizeClasses.SEGMENT);
    }
    java.util.Arrays.fill(partialCount, 0);
    usedBytes = 0;
  }

  /** Marks a live replica; false if it overlaps another or does not fit its segment's class. */
  boolean markUsed(long addr, long size) {
    Chunk c = chunks.get(HeapFormat.space(addr));
    long off = HeapFormat.offset(addr);
    int seg = (int) (off / SizeClasses.SEGMENT);
    if (size > SizeClasses.MAX_SMALL) {
      if (off % SizeClasses.SEGMENT != 0) return false;
      int segs = (int) ((size + SizeClasses.SEGMENT - 1) / SizeClasses.SEGMENT);
      if (seg + segs > c.kind.length) return false;
      for (int i = 0; i < segs; i++) if (c.kind[seg + i] != FREE) return false;
      c.kind[seg] = LARGE_HEAD;
      for (int i = 1; i < segs; i++) c.kind[seg + i] = LARGE_BODY;
      c.runLength[seg] = segs;
      c.freeSegments -= segs;
      usedBytes += (long) segs * SizeClasses.SEGMENT;
      return true;
    }
    int sc = SizeClasses.classOf(size);
    if (c.kind[seg] == FREE) formatSegment(c, seg, sc);
    if (c.kind[seg] != sc) return false;
    int inSeg = (int) (off & (SizeClasses.SEGMENT - 1)); // off >= 0; int division below
    int slotSize = SizeClasses.size(sc);
    if (inSeg % slotSize != 0) return false;
    int slot = inSeg / slotSize;
    long bit = 1L << (slot % 64);
    int w = seg * 8 + slot / 64;
    if ((c.freeSlots[w] & bit) == 0) return false;
    c.freeSlots[w] &= ~bit;
    c.freeCount[seg]--;
    usedBytes += SizeClasses.size(sc);
    return true;
  }

  void finishRebuild() {
    for (Chunk c : chunks) {
      if (c == null) continue;
      for (int seg = 0; seg < c.kind.length; seg++) {
        byte k = c.kind[seg];
        if (k > 0 && k <= SizeClasses.COUNT && c.freeCount[seg] > 0) {
          pushPartial(k, ((long) c.space << 32) | seg);
        }
      }
    }
  }

  /** The bytes a replica of {@code size} actually occupies. */
  static long footprint(long size) {
    if (size <= SizeClasses.MAX_SMALL) return SizeClasses.size(SizeClasses.classOf(size));
    return (size + SizeClasses.SEGMENT - 1) / SizeClasses.SEGMENT * SizeClasses.SEGMENT;
  }
}
