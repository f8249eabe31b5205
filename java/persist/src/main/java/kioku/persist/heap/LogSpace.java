package kioku.persist.heap;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import kioku.persist.pool.Medium;
import kioku.persist.pool.Pool;
import kioku.persist.pool.PoolException;
import kioku.persist.pool.Section;

/**
 * Where undo logs live: equal blocks in the pool sections {@code persist.log} (made with the
 * heap), {@code persist.log.1}, {@code persist.log.2}, ... (added when more are needed, on any
 * pool, with a pool commit). A log is a chain of blocks: its head, then extension blocks linked
 * through {@code next}, so a section's log grows as far as the pool can.
 *
 * <p>Block header (64 bytes), all u64:
 *
 * <pre>
 *   0 seq         the head's section number; moves on by 3 at every commit
 *   8 seqCheck    mix(seq), written with it: a check that is mix(seq - 3) or mix(seq + 3) is a
 *                 commit torn by a crash; anything else is damage (seq moves by 3 so that no
 *                 single flipped bit looks like a commit)
 *  16 next        the next block of the chain + 1 (0: none)
 *  24 nextCheck   tag of next under the head's seq (a stale or torn next ends the chain)
 *  32 link        the group this log commits with: leader block + 1 in bits 40..63, the
 *                 leader's seq in bits 0..39 (0: none)
 *  40 linkCheck   tag of link under this head's seq
 * </pre>
 *
 * Entries follow the header: three u64 (address | 1 if the old value is a reference, old value,
 * tag of both under the head's seq and block). An entry counts only if its tag matches, so a
 * torn entry, or one left from an earlier use of the block, ends the log.
 *
 * <p>A log is committed when its head's seq moves on, or when any log its link chain reaches has
 * moved on since the link was written (the group's leader committed for everyone). Recovery
 * ({@link #recover}) rolls back every log that is not committed.
 */
final class LogSpace {
  static final int HEADER = 64;
  static final int ENTRY = 24;
  private static final int SEQ = 0;
  private static final int SEQ_CHECK = 8;
  private static final int NEXT = 16;
  private static final int NEXT_CHECK = 24;
  private static final int LINK = 32;
  private static final int LINK_CHECK = 40;
  static final long SEQ_STEP = 3;
  private static final long LINK_SEQ_MASK = (1L << 40) - 1;

  private final Medium medium;
  private final Pool pool;
  private final Object poolLock;
  private final long blockBytes;
  private final int firstAreaBlocks;
  /** The areas, replaced whole when one is added (readers on other threads see one or the other). */
  private record Areas(long[] off, int[] blocks) {}

  private volatile Areas areas = new Areas(new long[0], new int[0]);
  private int[] free = new int[16];
  private int freeCount;

  LogSpace(Medium medium, Pool pool, Object poolLock, long blockBytes, int firstAreaBlocks) {
    this.medium = medium;
    this.pool = pool;
    this.poolLock = poolLock;
    this.blockBytes = blockBytes;
    this.firstAreaBlocks = firstAreaBlocks;
  }

  static String areaName(int index) {
    return index == 0 ? HeapFormat.LOG : HeapFormat.LOG + "." + index;
  }

  /** Maps the areas the pool has (at open or creation). */
  void mapAreas() throws HeapException {
    for (int a = 0; ; a++) {
      Optional<Section> s = pool.section(areaName(a));
      if (s.isEmpty()) break;
      long len = s.get().length();
      if (len < blockBytes) {
        throw new HeapException(
            HeapException.Reason.DAMAGED,
            "persistent heap damaged: " + areaName(a) + " is shorter than one log block;"
                + " restore the pool from a backup");
      }
      addArea(s.get().offset(), (int) Math.min(len / blockBytes, 1 << 24));
    }
    if (areas.off().length == 0) {
      throw new HeapException(
          HeapException.Reason.DAMAGED,
          "pool " + pool.path() + " has no section " + HeapFormat.LOG
              + ": it is not a complete Java heap; restore it from a backup");
    }
  }

  private synchronized void addArea(long off, int blocks) {
    Areas old = areas;
    int a = old.off().length;
    long[] o = Arrays.copyOf(old.off(), a + 1);
    int[] b = Arrays.copyOf(old.blocks(), a + 1);
    o[a] = off;
    b[a] = blocks;
    areas = new Areas(o, b);
    for (int i = blocks - 1; i >= 0; i--) pushFree(id(a, i));
  }

  private void pushFree(int block) {
    if (freeCount == free.length) free = Arrays.copyOf(free, freeCount * 2);
    free[freeCount++] = block;
  }

  static int id(int area, int index) {
    return (area << 24) | index;
  }

  long blockOff(int block) {
    return areas.off()[block >>> 24] + (long) (block & 0xffffff) * blockBytes;
  }

  /** Entries one block holds. */
  long entriesPerBlock() {
    return (blockBytes - HEADER) / ENTRY;
  }

  long entryOff(int block, long i) {
    return blockOff(block) + HEADER + i * ENTRY;
  }

  /** Blocks in every area (for tests and statistics). */
  int blocks() {
    int n = 0;
    for (int b : areas.blocks()) n += b;
    return n;
  }

  /**
   * A free block, adding an area to the pool when none is left (the new area has as many
   * blocks as all before it, so areas stay few).
   *
   * @throws HeapException FULL when the pool cannot grow
   */
  int take() throws HeapException {
    synchronized (this) {
      if (freeCount > 0) return free[--freeCount];
    }
    synchronized (poolLock) {
      synchronized (this) {
        if (freeCount > 0) return free[--freeCount];
      }
      int index = areas.off().length;
      int blocks = Math.max(firstAreaBlocks, blocks());
      try {
        Section s = pool.addSection(areaName(index), blocks * blockBytes, 0);
        pool.commit(new long[] {HeapFormat.VERSION});
        addArea(s.offset(), blocks);
      } catch (PoolException | IllegalArgumentException e) {
        throw new HeapException(
            HeapException.Reason.FULL,
            "a failure-atomic section needs more undo log and the pool cannot grow ("
                + e.getMessage() + "): free space where the pool lives",
            e);
      }
      synchronized (this) {
        return free[--freeCount];
      }
    }
  }

  synchronized void release(int block) {
    pushFree(block);
  }

  // ---------------------------------------------------------------- headers

  static long mix(long v) {
    if (v == 0) return 0; // a block never used reads (0, 0)
    long h = v * 0x9E3779B97F4A7C15L;
    h ^= h >>> 31;
    h *= 0xBF58476D1CE4E5B9L;
    h ^= h >>> 29;
    return h | 1; // never 0
  }

  static long tag(long seq, int block, long key, long old) {
    long h = seq * 0x9E3779B97F4A7C15L ^ (block + 1L) * 0xC2B2AE3D27D4EB4FL ^ key * 0x165667B19E3779F9L ^ old;
    h ^= h >>> 29;
    h *= 0xBF58476D1CE4E5B9L;
    h ^= h >>> 32;
    return h ^ 0x5bd1e9955bd1e995L;
  }

  /** The block's seq, or throws if its header is damaged. */
  long seq(int block) throws HeapException {
    long off = blockOff(block);
    long seq = medium.getLong(off + SEQ);
    long check = medium.getLong(off + SEQ_CHECK);
    if (check == mix(seq) || check == mix(seq - SEQ_STEP) || check == mix(seq + SEQ_STEP)) {
      return seq;
    }
    throw new HeapException(
        HeapException.Reason.DAMAGED,
        "persistent heap damaged: undo log block " + Integer.toHexString(block)
            + " has a bad header; restore the pool from a backup");
  }

  /** The seq a block holds, trusted (it was checked at open, and only this process writes it). */
  long seqUnchecked(int block) {
    return medium.getLong(blockOff(block) + SEQ);
  }

  /** Moves the block's seq on by one step, durably: a commit, or the end of a use. */
  long advance(int block) {
    long off = blockOff(block);
    long seq = medium.getLong(off + SEQ) + SEQ_STEP;
    medium.putLong(off + SEQ, seq);
    medium.putLong(off + SEQ_CHECK, mix(seq));
    medium.persist(off, 16);
    return seq;
  }

  /** Links {@code block}'s chain to {@code next}, durably (before entries go there). */
  void linkNext(int block, long headSeq, int next) {
    long off = blockOff(block);
    long v = next + 1L;
    medium.putLong(off + NEXT, v);
    medium.putLong(off + NEXT_CHECK, tag(headSeq, block, v, 1));
    medium.persist(off + NEXT, 16);
  }

  /** The next block of a chain whose head has {@code headSeq}, or -1. */
  private int next(int block, long headSeq) {
    long off = blockOff(block);
    long v = medium.getLong(off + NEXT);
    if (v == 0 || medium.getLong(off + NEXT_CHECK) != tag(headSeq, block, v, 1)) return -1;
    long b = v - 1;
    if (b < 0 || b > Integer.MAX_VALUE || !exists((int) b)) return -1;
    return (int) b;
  }

  private boolean exists(int block) {
    Areas now = areas;
    int a = block >>> 24;
    return a < now.off().length && (block & 0xffffff) < now.blocks()[a];
  }

  /** Durably links the log headed by {@code head} (seq {@code seq}) to a group leader. */
  void link(int head, long seq, int leader, long leaderSeq) {
    long off = blockOff(head);
    long v = ((leader + 1L) << 40) | (leaderSeq & LINK_SEQ_MASK);
    medium.putLong(off + LINK, v);
    medium.putLong(off + LINK_CHECK, tag(seq, head, v, 2));
    medium.persist(off + LINK, 16);
  }

  void unlink(int head) {
    long off = blockOff(head);
    medium.putLong(off + LINK, 0);
    medium.putLong(off + LINK_CHECK, 0);
    medium.persist(off + LINK, 16);
  }

  // ---------------------------------------------------------------- entries

  /** Writes entry {@code i} of a chain (in {@code block}, its {@code local}-th) durably. */
  void putEntry(int block, long local, long headSeq, int head, long key, long old) {
    long e = entryOff(block, local);
    medium.putLong(e, key);
    medium.putLong(e + 8, old);
    medium.putLong(e + 16, tag(headSeq, head, key, old));
    medium.persist(e, ENTRY);
  }

  /** The valid entries of the log headed by {@code head}, oldest first: {key, old} pairs. */
  List<long[]> entries(int head, long seq) {
    List<long[]> out = new ArrayList<>();
    int block = head;
    int hops = 0;
    while (block >= 0 && hops++ <= blocks()) {
      for (long i = 0; i < entriesPerBlock(); i++) {
        long e = entryOff(block, i);
        long key = medium.getLong(e);
        long old = medium.getLong(e + 8);
        if (medium.getLong(e + 16) != tag(seq, head, key, old)) return out;
        out.add(new long[] {key, old});
      }
      block = next(block, seq);
    }
    return out;
  }

  // ---------------------------------------------------------------- recovery

  /** A log found at open that is not committed. */
  record OpenLog(int head, long seq, List<long[]> entries) {}

  /**
   * The logs a crash left uncommitted. Checks every block header first (a damaged one stops
   * the open: without it, what to roll back is unknown).
   */
  List<OpenLog> uncommitted() throws HeapException {
    int[] areaBlocks = areas.blocks();
    int n = areaBlocks.length;
    List<OpenLog> open = new ArrayList<>();
    long[][] seqs = new long[n][];
    for (int a = 0; a < n; a++) {
      seqs[a] = new long[areaBlocks[a]];
      for (int i = 0; i < areaBlocks[a]; i++) seqs[a][i] = seq(id(a, i));
    }
    for (int a = 0; a < n; a++) {
      for (int i = 0; i < areaBlocks[a]; i++) {
        int head = id(a, i);
        long seq = seqs[a][i];
        List<long[]> entries = entries(head, seq);
        if (entries.isEmpty()) continue;
        if (committedThroughLinks(head, seq, seqs)) continue;
        open.add(new OpenLog(head, seq, entries));
      }
    }
    return open;
  }

  /** Whether a leader this log is linked to (directly or through other leaders) has committed. */
  private boolean committedThroughLinks(int head, long seq, long[][] seqs) {
    int block = head;
    long blockSeq = seq;
    for (int hops = 0; hops < 64; hops++) {
      long off = blockOff(block);
      long v = medium.getLong(off + LINK);
      if (v == 0 || medium.getLong(off + LINK_CHECK) != tag(blockSeq, block, v, 2)) return false;
      long leader = (v >>> 40) - 1;
      if (leader < 0 || !exists((int) leader)) return false;
      int l = (int) leader;
      long leaderSeq = seqs[l >>> 24][l & 0xffffff];
      if ((leaderSeq & LINK_SEQ_MASK) != (v & LINK_SEQ_MASK)) return true;
      block = l;
      blockSeq = leaderSeq;
    }
    return false;
  }
}
