package kioku.persist.heap;

import java.util.ArrayList;
import java.util.List;
import java.util.function.LongConsumer;
import kioku.persist.PersistenceException;
import kioku.persist.pool.Medium;
import kioku.persist.pool.Section;

/**
 * Failure-atomic sections: a thread's writes to replicas between {@link #enter} and the
 * matching {@link #exit} survive a crash all or not at all. RBP's double update makes single
 * stores durable; a collection operation (HashMap.resize moves every node) is many stores, so
 * each operation on a persistent collection is one section. Before the first store to a
 * replica word in a section, its old value goes to the thread's undo log, durably; at the end
 * the stores are drained and the log is invalidated with one 8-byte store (its sequence
 * number). Opening a heap rolls back every log that is still valid.
 *
 * <p>A log slot: u64 sequence number, 56 bytes reserved, then entries of three u64: address
 * (bit 0 set if the old value is a reference), old value, and a tag mixing the slot, the
 * sequence number and both values. An entry counts only if its tag matches, so a torn entry, or
 * one left from an earlier section, ends the log.
 */
final class UndoLogs {
  static final int DEFAULT_SLOTS = 8;
  static final long DEFAULT_SLOT_BYTES = 8L << 20;
  private static final int SLOT_HEADER = 64;
  private static final int ENTRY = 24;

  private final PersistentHeap heap;
  private final Medium medium;
  private final long logOff;
  private final int slots;
  private final long slotBytes;
  private final Object slotLock = new Object();
  private final int[] freeSlots; // a stack of free slot numbers (not a JDK collection: no barrier)
  private int freeCount;

  /** A thread's open section. */
  private static final class Open {
    int depth;
    int slot = -1;
    long seq;
    int entries;
    final LongSet logged = new LongSet();
  }

  private final ThreadLocal<Open> open = ThreadLocal.withInitial(Open::new);

  UndoLogs(PersistentHeap heap, Medium medium, long metaOff, Section log) {
    this.heap = heap;
    this.medium = medium;
    this.logOff = log.offset();
    int n = medium.getInt(metaOff + HeapFormat.M_LOG_SLOTS);
    long bytes = medium.getInt(metaOff + HeapFormat.M_LOG_SLOT_BYTES) & 0xffffffffL;
    // A heap being created has not written its header yet: take the section's shape.
    if (n <= 0 || bytes <= SLOT_HEADER) {
      n = DEFAULT_SLOTS;
      bytes = log.length() / n;
    }
    this.slots = n;
    this.slotBytes = bytes;
    this.freeSlots = new int[slots];
    for (int i = slots - 1; i >= 0; i--) freeSlots[freeCount++] = i;
  }

  static long sectionLength(int slots, long slotBytes) {
    return slots * slotBytes;
  }

  private long slotOff(int slot) {
    return logOff + slot * slotBytes;
  }

  private long capacity() {
    return (slotBytes - SLOT_HEADER) / ENTRY;
  }

  static long tag(long seq, int slot, long addr, long old) {
    long h = seq * 0x9E3779B97F4A7C15L ^ (slot + 1) * 0xC2B2AE3D27D4EB4FL ^ addr * 0x165667B19E3779F9L ^ old;
    h ^= h >>> 29;
    h *= 0xBF58476D1CE4E5B9L;
    h ^= h >>> 32;
    return h ^ 0x5bd1e9955bd1e995L;
  }

  /** Opens (or nests) a section of this thread; returns a nonzero token. */
  int enter() {
    Open o = open.get();
    if (o.depth++ == 0) {
      o.slot = takeSlot();
      o.seq = medium.getLong(slotOff(o.slot));
      o.entries = 0;
    }
    return 1;
  }

  private int takeSlot() {
    synchronized (slotLock) {
      while (freeCount == 0) {
        try {
          slotLock.wait();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new PersistenceException("interrupted waiting for an undo-log slot");
        }
      }
      return freeSlots[--freeCount];
    }
  }

  /** Ends the section: its stores become durable together. */
  void exit(int token) {
    Open o = open.get();
    if (o.depth == 0) return;
    if (--o.depth > 0) return;
    if (o.entries > 0) {
      medium.drain(); // every store of the section, before the log stops counting
      long at = slotOff(o.slot);
      medium.putLong(at, o.seq + 1);
      medium.persist(at, 8);
    }
    o.logged.clear();
    int slot = o.slot;
    o.slot = -1;
    synchronized (slotLock) {
      freeSlots[freeCount++] = slot;
      slotLock.notify();
    }
  }

  /**
   * Called before a store to the replica word at heap address {@code addr}: inside a section,
   * saves the old value durably (once per word) and returns true (the caller then need not
   * drain); outside one returns false.
   */
  boolean beforeWrite(long addr, boolean isRef) {
    Open o = open.get();
    if (o.depth == 0) return false;
    if (!o.logged.add(addr)) return true;
    if (o.entries >= capacity()) {
      throw new PersistenceException(
          "a failure-atomic section wrote more than " + capacity() + " words, the undo-log slot's"
              + " capacity: open the pool with a larger log (agent option logSlotBytes=)");
    }
    HeapSpace space = heap.space();
    long old = space.getLong(addr);
    long key = addr | (isRef ? 1 : 0);
    long e = slotOff(o.slot) + SLOT_HEADER + (long) o.entries * ENTRY;
    medium.putLong(e, key);
    medium.putLong(e + 8, old);
    medium.putLong(e + 16, tag(o.seq, o.slot, key, old));
    medium.persist(e, ENTRY);
    o.entries++;
    return true;
  }

  /** The valid entries of a slot, oldest first: {key, old}. */
  private List<long[]> entries(int slot) {
    long base = slotOff(slot);
    long seq = medium.getLong(base);
    List<long[]> out = new ArrayList<>();
    for (long i = 0; i < capacity(); i++) {
      long e = base + SLOT_HEADER + i * ENTRY;
      long key = medium.getLong(e);
      long old = medium.getLong(e + 8);
      if (medium.getLong(e + 16) != tag(seq, slot, key, old)) break;
      out.add(new long[] {key, old});
    }
    return out;
  }

  /** At open: undo every section a crash interrupted, newest store first. */
  void recover() throws HeapException {
    HeapSpace space = heap.space();
    for (int s = 0; s < slots; s++) {
      List<long[]> log = entries(s);
      if (log.isEmpty()) continue;
      for (int i = log.size() - 1; i >= 0; i--) {
        long addr = log.get(i)[0] & ~7L;
        int sp = HeapFormat.space(addr);
        if (sp >= space.spaces() || HeapFormat.offset(addr) + 8 > space.spaceLength(sp)) {
          throw new HeapException(
              HeapException.Reason.DAMAGED,
              "persistent heap damaged: undo log " + s + " names address 0x"
                  + Long.toHexString(addr) + " outside the heap; restore the pool from a backup");
        }
        space.putLong(addr, log.get(i)[1]);
        space.flush(addr, 8);
      }
      medium.drain();
      long at = slotOff(s);
      medium.putLong(at, medium.getLong(at) + 1);
      medium.persist(at, 8);
    }
  }

  /** Old values of references in the logs of open sections (the GC keeps them alive). */
  void forEachLoggedReference(LongConsumer c) {
    for (int s = 0; s < slots; s++) {
      for (long[] e : entries(s)) if ((e[0] & 1) != 0 && e[1] != 0) c.accept(e[1]);
    }
  }
}
