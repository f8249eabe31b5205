package kioku.persist.pool;

import java.util.ArrayList;
import java.util.List;

/** Section tables: 64-byte entries, checked against their slot and the header when read. */
final class SectionTable {
  private SectionTable() {}

  /** {@code entries.size() * 64} bytes. */
  static byte[] encode(List<Section> entries) {
    byte[] out = new byte[entries.size() * Format.ENTRY_LEN];
    for (int i = 0; i < entries.size(); i++) {
      Section s = entries.get(i);
      int at = i * Format.ENTRY_LEN;
      Format.putStr(out, at, at + 32, s.name());
      Format.putU64(out, at + 32, s.offset());
      Format.putU64(out, at + 40, s.length());
      Format.putU32(out, at + 48, s.flags());
    }
    return out;
  }

  /**
   * Parses the table a slot describes and checks it: checksum, names (valid, unique),
   * alignment, bounds (the slot's pool length) and no overlap, in the Rust reader's order.
   */
  static List<Section> decode(byte[] b, Slot slot, Header header) throws FormatProblem {
    int n = slot.tableEntries();
    int bytes = n * Format.ENTRY_LEN;
    int computed = Format.crc(b, 0, bytes);
    if (computed != slot.tableCrc()) {
      throw new FormatProblem("section table checksum mismatch (stored "
          + Format.hex32(slot.tableCrc()) + ", computed " + Format.hex32(computed) + ")");
    }
    long page = header.pageSize() & 0xffffffffL;
    List<Section> out = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      int at = i * Format.ENTRY_LEN;
      String name = Format.strField(b, at, at + 32);
      if (name == null || name.isEmpty()) {
        throw new FormatProblem("section entry " + i + ": invalid name");
      }
      if (!Format.allZero(b, at + 52, at + 64)) {
        throw new FormatProblem("section '" + name + "': reserved bytes are not zero");
      }
      Section s = new Section(name, Format.u64(b, at + 32), Format.u64(b, at + 40),
          Format.u32(b, at + 48));
      if (Long.remainderUnsigned(s.offset(), page) != 0
          || Long.remainderUnsigned(s.length(), page) != 0
          || Long.compareUnsigned(s.offset(), header.dataOff()) < 0) {
        throw new FormatProblem(
            "section '" + name + "': extent is not page-aligned in the data area");
      }
      long end = s.offset() + s.length();
      boolean overflow = Long.compareUnsigned(end, s.offset()) < 0;
      if (overflow || Long.compareUnsigned(end, slot.poolLen()) > 0) {
        throw new FormatProblem("section '" + name + "': extent "
            + Long.toUnsignedString(s.offset()) + "+" + Long.toUnsignedString(s.length())
            + " ends past the committed pool length " + Long.toUnsignedString(slot.poolLen()));
      }
      for (Section o : out) {
        if (o.name().equals(name)) {
          throw new FormatProblem("section '" + name + "' appears twice");
        }
      }
      for (Section o : out) {
        if (Long.compareUnsigned(o.offset(), end) < 0
            && Long.compareUnsigned(s.offset(), o.end()) < 0) {
          throw new FormatProblem(
              "sections '" + o.name() + "' and '" + name + "' overlap");
        }
      }
      out.add(s);
    }
    return out;
  }
}
