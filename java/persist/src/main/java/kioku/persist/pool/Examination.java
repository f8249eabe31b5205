package kioku.persist.pool;

import java.util.List;

/**
 * What a pool file's metadata says and which commit to use — read without trusting it, through
 * a {@link Reader} (plain reads of the file before it is mapped, or a medium). The twin of the
 * Rust {@code examine.rs}; {@link Pool} turns the verdict into the state or a typed error.
 */
record Examination(Header header, long fileLen, long index, List<SlotState> slots,
    Verdict verdict) {

  /** Reads up to {@code len} bytes at {@code off}; fewer only past the end of the file. */
  @FunctionalInterface
  interface Reader {
    byte[] read(long off, int len) throws PoolException;
  }

  /** What one commit slot holds, or why it cannot be used. */
  sealed interface SlotState {
    /** Checksums verify and the section table is consistent. */
    record Intact(Slot slot, List<Section> sections) implements SlotState {}

    /** Never written. */
    record Empty() implements SlotState {}

    /** Slot checksum or fields bad (torn or damaged). */
    record Damaged(String detail) implements SlotState {}

    /** The slot verifies but its section table does not. */
    record TableDamaged(Slot slot, String detail) implements SlotState {}

    /** The slot verifies but needs a longer file than there is. */
    record Truncated(Slot slot, long fileLen) implements SlotState {}

    /** One line on why this slot cannot be used (null when intact). */
    default String problem() {
      return problemOf(this);
    }
  }

  private static String problemOf(SlotState s) {
    if (s instanceof SlotState.Empty) {
      return "empty (never written)";
    } else if (s instanceof SlotState.Damaged d) {
      return d.detail();
    } else if (s instanceof SlotState.TableDamaged t) {
      return t.detail();
    } else if (s instanceof SlotState.Truncated t) {
      return "needs a " + Long.toUnsignedString(t.slot().poolLen()) + "-byte file, the file has "
          + t.fileLen() + " bytes";
    }
    return null;
  }

  /** Which commit to use. */
  sealed interface Verdict {
    /** The live slot is intact. */
    record Healthy(int live) implements Verdict {}

    /** The live slot is damaged but the other one is intact (an older commit). */
    record RollbackAvailable(int damaged, String detail, int previous, long previousEpoch)
        implements Verdict {}

    /** The metadata or the live commit needs more file than exists. */
    record Truncated(long needed, long found) implements Verdict {}

    /** No usable commit. */
    record CommitDamaged(String detail) implements Verdict {}
  }

  /**
   * Examines a file of {@code fileLen} bytes. Header problems are thrown at once (nothing else
   * is read then); everything after the header ends in a verdict.
   */
  static Examination examine(long fileLen, Reader read, String path) throws PoolException {
    Header h = Header.decode(read.read(0, Format.HEADER_LEN), path, fileLen);
    if (fileLen < h.dataOff()) {
      return new Examination(h, fileLen, -1, List.of(),
          new Verdict.Truncated(h.dataOff(), fileLen));
    }
    long index = Format.u64(read.read(Format.INDEX_OFF, 8), 0);
    List<SlotState> slots = List.of(slot(0, h, fileLen, read), slot(1, h, fileLen, read));
    return new Examination(h, fileLen, index, slots, decide(index, slots));
  }

  private static SlotState slot(int i, Header h, long fileLen, Reader read)
      throws PoolException {
    Slot slot;
    try {
      slot = Slot.decode(read.read(Format.slotOff(i), Format.SLOT_LEN));
    } catch (FormatProblem p) {
      return new SlotState.Damaged(p.getMessage());
    }
    if (slot == null) {
      return new SlotState.Empty();
    }
    if (Long.compareUnsigned(slot.poolLen(), fileLen) > 0) {
      return new SlotState.Truncated(slot, fileLen);
    }
    byte[] table = read.read(Format.TABLE_OFF[i], Format.TABLE_LEN);
    try {
      return new SlotState.Intact(slot, List.copyOf(SectionTable.decode(table, slot, h)));
    } catch (FormatProblem p) {
      return new SlotState.TableDamaged(slot, p.getMessage());
    }
  }

  private static Verdict decide(long index, List<SlotState> slots) {
    if (Long.compareUnsigned(index, 1) > 0) {
      return new Verdict.CommitDamaged(
          "live index holds " + Long.toUnsignedString(index) + ", not 0 or 1");
    }
    int live = (int) index;
    int other = 1 - live;
    SlotState l = slots.get(live);
    if (l instanceof SlotState.Intact) {
      return new Verdict.Healthy(live);
    }
    if (l instanceof SlotState.Truncated t) {
      return new Verdict.Truncated(t.slot().poolLen(), t.fileLen());
    }
    String detail = "live slot " + live + ": " + l.problem();
    SlotState o = slots.get(other);
    if (o instanceof SlotState.Intact prev) {
      return new Verdict.RollbackAvailable(live, detail, other, prev.slot().epoch());
    }
    return new Verdict.CommitDamaged(detail + "; slot " + other + ": " + o.problem());
  }
}
