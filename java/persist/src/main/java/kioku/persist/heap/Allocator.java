package kioku.persist.heap;

import java.util.ArrayList;
import java.util.List;

/**
 * Space for replicas (the thesis's NVM allocator). Small replicas go to 4 KiB segments of one
 * size class; larger ones take runs of whole segments. All of this metadata lives in DRAM
 * only: at open it is rebuilt from the replicas reachable from the roots, which is why a
 * replica becomes reachable only after it is durable.
 *
 * <p>Threads making objects persistent at once each take whole segments ({@link #takeSegment})
 * and hand out their slots themselves (a {@link SlotCache}), so that allocation does not
 * serialise them: the allocator's monitor is taken once per segment, not once per replica.
 * While a thread holds a segment no other thread allocates in it, which is what lets
 * make_persistent find the thread responsible for a grey replica from its address. Allocation,
 * freeing and the sizes are synchronized; the rebuild ({@link #beginRebuild}, {@link
 * #markUsed}, {@link #finishRebuild}) runs with the heap held exclusively, nothing else
 * allocating.
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
    /** Per segment: the make_persistent holding it (SlotCache), or null. */
    final Object[] holder;
    int freeSegments;
    int rover;

    Chunk(int space, long len) {
      this.space = space;
      int n = (int) (len / SizeClasses.SEGMENT);
      kind = new byte[n];
      runLength = new int[n];
      freeSlots = new long[n * 8];
      freeCount = new int[n];
      holder = new Object[n];
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
  synchronized void addChunk(int space, long len) {
    while (chunks.size() <= space) chunks.add(null);
    chunks.set(space, new Chunk(space, len));
    capacity = capacityBytes();
  }

  /** {@link #capacityBytes}, kept for {@link #approxCapacityBytes}. */
  private long capacity;

  /**
   * {@link #usedBytes} read without the monitor: possibly stale, for a heuristic that must not
   * take a lock on every store (whether a GC may be due).
   */
  long approxUsedBytes() {
    return usedBytes;
  }

  /** {@link #capacityBytes} read without the monitor, as {@link #approxUsedBytes}. */
  long approxCapacityBytes() {
    return capacity;
  }

  synchronized long usedBytes() {
    return usedBytes;
  }

  synchronized long capacityBytes() {
    long n = 0;
    for (Chunk c : chunks) if (c != null) n += (long) c.kind.length * SizeClasses.SEGMENT;
    return n;
  }

  /** A replica of {@code size} bytes (a multiple of 8), or 0 if no space has room. */
  synchronized long allocate(long size) {
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
  synchronized void free(long addr, long size) {
    Chunk c = chunks.get(HeapFormat.space(addr));
    long off = HeapFormat.offset(addr);
    int seg = (int) (off / SizeClasses.SEGMENT);
    byte k = c.kind[seg];
    if (k == LARGE_HEAD) {
      int segs = c.runLength[seg];
      for (int i = 0; i < segs; i++) c.kind[seg + i] = FREE;
      c.freeSegments += segs;
      c.holder[seg] = null;
      usedBytes -= (long) segs * SizeClasses.SEGMENT;
      return;
    }
    int sc = k;
    int slot = (int) ((off % SizeClasses.SEGMENT) / SizeClasses.size(sc));
    c.freeSlots[seg * 8 + slot / 64] |= 1L << (slot % 64);
    c.freeCount[seg]++;
    usedBytes -= SizeClasses.size(sc);
    if (c.holder[seg] != null) return; // its holder's release makes it anyone's again
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
    generation++;
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

  /**
   * Takes every free slot of one segment of size class {@code sc} for {@code holder} alone:
   * their bits go to {@code bits[0..8)} (slot k is bit k % 64 of word k / 64) and they count as
   * used. The segment stays the holder's (no other thread gets a slot of it, even one freed
   * meanwhile) until {@link #release}. Returns the segment (space << 32 | segment), or -1 if no
   * space has room.
   */
  synchronized long takeSegment(int sc, long[] bits, Object holder) {
    while (true) {
      if (partialCount[sc] == 0) {
        if (!newSegment(sc)) return -1;
        continue;
      }
      long ref = partial[sc][--partialCount[sc]];
      Chunk c = chunks.get((int) (ref >>> 32));
      int seg = (int) ref;
      // Stale (filled up, freed) or held: a held segment is pushed again when released.
      if (c.kind[seg] != sc || c.freeCount[seg] == 0 || c.holder[seg] != null) continue;
      System.arraycopy(c.freeSlots, seg * 8, bits, 0, 8);
      java.util.Arrays.fill(c.freeSlots, seg * 8, seg * 8 + 8, 0L);
      usedBytes += (long) c.freeCount[seg] * SizeClasses.size(sc);
      c.freeCount[seg] = 0;
      c.holder[seg] = holder;
      return ref;
    }
  }

  /** A large replica ({@link #allocate}) held by {@code holder} until {@link #release}; 0 if none. */
  synchronized long allocateHeld(long size, Object holder) {
    long addr = allocate(size);
    if (addr != 0) chunks.get(HeapFormat.space(addr)).holder[(int) (HeapFormat.offset(addr) / SizeClasses.SEGMENT)] = holder;
    return addr;
  }

  /** The holder of the segment (or large replica) at {@code addr}; null if none holds it. */
  synchronized Object holderOf(long addr) {
    Chunk c = HeapFormat.space(addr) < chunks.size() ? chunks.get(HeapFormat.space(addr)) : null;
    return c == null ? null : c.holder[(int) (HeapFormat.offset(addr) / SizeClasses.SEGMENT)];
  }

  /**
   * Ends a hold: the slots of {@code bits} (small segments, class {@code sc}; null for a large
   * replica) were not used and are free again; the segment is anyone's again.
   */
  synchronized void release(long ref, int sc, long[] bits, Object holder) {
    Chunk c = chunks.get((int) (ref >>> 32));
    int seg = (int) ref;
    if (c.holder[seg] != holder) return; // a large replica freed since, maybe someone else's now
    c.holder[seg] = null;
    if (bits == null) return;
    int n = 0;
    for (int w = 0; w < 8; w++) {
      c.freeSlots[seg * 8 + w] |= bits[w];
      n += Long.bitCount(bits[w]);
      bits[w] = 0;
    }
    c.freeCount[seg] += n;
    usedBytes -= (long) n * SizeClasses.size(sc);
    if (c.kind[seg] == sc && c.freeCount[seg] > 0) {
      if (c.freeCount[seg] == SizeClasses.slotsPerSegment(sc)) {
        c.kind[seg] = FREE;
        c.freeSegments++;
      } else {
        pushPartial(sc, ref);
      }
    }
  }

  /**
   * Bumped by every rebuild ({@link #beginRebuild}): holds taken before it are gone (the
   * rebuild counts only live replicas; a slot held but unused is free again).
   */
  private volatile int generation;

  /**
   * One thread's make_persistent space: per size class, the segment it holds and the slots of
   * it still free, and every segment and large replica it holds. Kept from one make_persistent
   * of the thread to the next (a small graph made persistent takes no segment), used by one
   * call at a time: {@link #current} is that call, which is what another thread meeting a grey
   * replica in a held segment joins. {@link #endCall} gives back what the call used up.
   */
  static final class SlotCache {
    private final Allocator alloc;
    private final long[] segment = new long[SizeClasses.COUNT + 1];
    private final long[][] bits = new long[SizeClasses.COUNT + 1][];
    /** Every segment held (open addressing, -1 empty), with its size class (0: large). */
    private long[] held = new long[16];
    private byte[] heldClass = new byte[16];
    private int heldCount;
    private int generation;
    /** The make_persistent using this cache now (null between calls). */
    volatile Object current;

    SlotCache(Allocator alloc) {
      this.alloc = alloc;
      java.util.Arrays.fill(segment, -1L);
      java.util.Arrays.fill(held, -1L);
      generation = alloc.generation;
    }

    /** Starts a call: {@code call} is responsible for what it shades from here on. */
    void beginCall(Object call) {
      if (generation != alloc.generation) {
        // A rebuild forgot every hold: start empty.
        java.util.Arrays.fill(segment, -1L);
        java.util.Arrays.fill(held, -1L);
        heldCount = 0;
        generation = alloc.generation;
      }
      current = call;
    }

    /** Ends a call (its grey objects all published or white again): gives back what it used up. */
    void endCall() {
      int removed = 0;
      for (int i = 0; i < held.length; i++) {
        long ref = held[i];
        if (ref == -1L) continue;
        int sc = heldClass[i];
        if (sc != 0 && segment[sc] == ref) continue; // still has slots: kept for the next call
        alloc.release(ref, sc, sc == 0 ? null : NONE, this);
        held[i] = -1L;
        heldCount--;
        removed++;
      }
      if (removed > 0) rehash();
      current = null;
    }

    /** A slot for a small replica of class {@code sc}; 0 if the heap has no segment left. */
    long allocate(int sc) {
      long[] b = bits[sc];
      while (true) {
        if (segment[sc] != -1L) {
          for (int w = 0; w < 8; w++) {
            long x = b[w];
            if (x != 0) {
              int k = Long.numberOfTrailingZeros(x);
              b[w] = x & (x - 1);
              long ref = segment[sc];
              return HeapFormat.address((int) (ref >>> 32),
                  (long) (int) ref * SizeClasses.SEGMENT + (long) (w * 64 + k) * SizeClasses.size(sc));
            }
          }
          segment[sc] = -1L; // used up; held until the call ends
        }
        if (b == null) b = bits[sc] = new long[8];
        long ref = alloc.takeSegment(sc, b, this);
        if (ref == -1L) return 0;
        hold(ref, sc);
        segment[sc] = ref;
      }
    }

    /** A large replica, held until the call ends; 0 if no space has room. */
    long allocateLarge(long size) {
      long addr = alloc.allocateHeld(size, this);
      if (addr != 0) hold(segmentOf(addr), 0);
      return addr;
    }

    /** Puts back a slot this cache handed out that was not needed. */
    void unallocate(long addr, long size) {
      if (size <= SizeClasses.MAX_SMALL) {
        int sc = SizeClasses.classOf(size);
        if (segment[sc] == segmentOf(addr)) {
          int slot = (int) ((HeapFormat.offset(addr) % SizeClasses.SEGMENT) / SizeClasses.size(sc));
          bits[sc][slot / 64] |= 1L << (slot % 64);
          return;
        }
      }
      alloc.free(addr, size); // its segment stays held: nobody else gets the slot meanwhile
    }

    /** True if this cache holds the segment (or large replica) that {@code addr} lies in. */
    boolean holds(long addr) {
      long ref = segmentOf(addr);
      int mask = held.length - 1;
      for (int i = mix(ref) & mask; ; i = (i + 1) & mask) {
        if (held[i] == ref) return true;
        if (held[i] == -1L) return false;
      }
    }

    /** Ends every hold; slots not handed out are free again. */
    void releaseAll() {
      for (int i = 0; i < held.length; i++) {
        long ref = held[i];
        if (ref == -1L) continue;
        int sc = heldClass[i];
        alloc.release(ref, sc, sc == 0 ? null : (segment[sc] == ref ? bits[sc] : NONE), this);
        held[i] = -1L;
      }
      heldCount = 0;
      java.util.Arrays.fill(segment, -1L);
      current = null;
    }

    /** No slot left to give back (a segment used up): all its words stay 0. */
    private static final long[] NONE = new long[8];

    private static long segmentOf(long addr) {
      return ((long) HeapFormat.space(addr) << 32) | (HeapFormat.offset(addr) / SizeClasses.SEGMENT);
    }

    private static int mix(long ref) {
      long h = ref * 0x9E3779B97F4A7C15L;
      return (int) (h >>> 40);
    }

    private void hold(long ref, int sc) {
      if ((heldCount + 1) * 2 > held.length) grow(held.length * 2);
      insert(ref, sc);
      heldCount++;
    }

    private void insert(long ref, int sc) {
      int mask = held.length - 1;
      int i = mix(ref) & mask;
      while (held[i] != -1L) i = (i + 1) & mask;
      held[i] = ref;
      heldClass[i] = (byte) sc;
    }

    /** Re-inserts what is held (after removals, which open addressing cannot do in place). */
    private void rehash() {
      grow(Math.max(16, Integer.highestOneBit(Math.max(1, heldCount) * 4)));
    }

    private void grow(int size) {
      long[] old = held;
      byte[] oldClass = heldClass;
      held = new long[size];
      heldClass = new byte[size];
      java.util.Arrays.fill(held, -1L);
      for (int i = 0; i < old.length; i++) if (old[i] != -1L) insert(old[i], oldClass[i]);
    }
  }
}
