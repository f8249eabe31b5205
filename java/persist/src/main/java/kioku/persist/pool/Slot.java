package kioku.persist.pool;

/**
 * One commit slot (256 bytes): everything a commit makes durable besides section contents.
 *
 * @param poolLen the file length this commit needs; a shorter file is truncated
 * @param tableEntries entries used in this slot's section table
 * @param tableCrc CRC-32C of those entries
 */
record Slot(
    long epoch, long committedUnixNs, long poolLen, int tableEntries, int tableCrc, long[] roots) {

  Slot {
    roots = roots.clone();
  }

  @Override
  public long[] roots() {
    return roots.clone();
  }

  byte[] encode() {
    if (roots.length > Format.MAX_ROOTS) {
      throw new IllegalArgumentException("too many roots: " + roots.length);
    }
    byte[] b = new byte[Format.SLOT_LEN];
    Format.putU64(b, 0, epoch);
    Format.putU64(b, 8, committedUnixNs);
    Format.putU64(b, 16, poolLen);
    Format.putU32(b, 24, tableEntries);
    Format.putU32(b, 28, tableCrc);
    Format.putU32(b, 32, roots.length);
    for (int i = 0; i < roots.length; i++) {
      Format.putU64(b, 40 + 8 * i, roots[i]);
    }
    Format.putU32(b, Format.SLOT_CRC_AT, Format.crc(b, 0, Format.SLOT_CRC_AT));
    return b;
  }

  /**
   * Parses a slot: null when it is empty (256 zero bytes, never written); a problem when it is
   * torn or damaged (checksum) or its fields are out of range.
   */
  static Slot decode(byte[] b) throws FormatProblem {
    if (Format.allZero(b, 0, Format.SLOT_LEN)) {
      return null;
    }
    int stored = Format.u32(b, Format.SLOT_CRC_AT);
    int computed = Format.crc(b, 0, Format.SLOT_CRC_AT);
    if (stored != computed) {
      throw new FormatProblem("slot checksum mismatch (stored " + Format.hex32(stored)
          + ", computed " + Format.hex32(computed) + ")");
    }
    int entries = Format.u32(b, 24);
    if (Integer.compareUnsigned(entries, Format.MAX_SECTIONS) > 0) {
      throw new FormatProblem("slot field invalid: section count");
    }
    int nroots = Format.u32(b, 32);
    if (Integer.compareUnsigned(nroots, Format.MAX_ROOTS) > 0) {
      throw new FormatProblem("slot field invalid: root count");
    }
    if (!Format.allZero(b, 40 + 8 * nroots, Format.SLOT_CRC_AT) || Format.u32(b, 36) != 0) {
      throw new FormatProblem("slot field invalid: reserved bytes");
    }
    long[] roots = new long[nroots];
    for (int i = 0; i < nroots; i++) {
      roots[i] = Format.u64(b, 40 + 8 * i);
    }
    return new Slot(Format.u64(b, 0), Format.u64(b, 8), Format.u64(b, 16), entries,
        Format.u32(b, 28), roots);
  }
}
