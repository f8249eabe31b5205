package kioku.persist.pool;

import java.util.Arrays;
import java.util.UUID;

/** The pool header (offset 0, 256 bytes), written once at creation. */
record Header(
    UUID uuid, int pageSize, int createdMedium, long createdUnixNs, String kind, long dataOff) {

  byte[] encode() {
    byte[] b = new byte[Format.HEADER_LEN];
    System.arraycopy(Format.MAGIC, 0, b, 0, 8);
    Format.putU32(b, 8, Format.VERSION);
    Format.putU32(b, 12, Format.HEADER_LEN);
    putUuid(b, 16, uuid);
    Format.putU32(b, 32, pageSize);
    Format.putU32(b, 36, createdMedium);
    Format.putU64(b, 40, createdUnixNs);
    Format.putStr(b, 48, 80, kind);
    Format.putU32(b, 80, Format.MAX_SECTIONS);
    Format.putU32(b, 84, Format.MAX_ROOTS);
    Format.putU64(b, 88, Format.COMMIT_OFF);
    Format.putU64(b, 96, Format.TABLE_OFF[0]);
    Format.putU64(b, 104, Format.TABLE_OFF[1]);
    Format.putU64(b, 112, dataOff);
    Format.putU32(b, Format.HEADER_CRC_AT, Format.crc(b, 0, Format.HEADER_CRC_AT));
    return b;
  }

  /**
   * Parses and checks the first bytes of a file (fewer than 256 when the file is shorter). The
   * order of checks is part of the format: magic, version, length, checksum, then the fields —
   * so that a future version may change everything after the version field.
   */
  static Header decode(byte[] b, String path, long fileLen) throws PoolException {
    if (b.length < 12) {
      if (b.length >= 8 && !Arrays.equals(b, 0, 8, Format.MAGIC, 0, 8)) {
        throw PoolException.notAPool(path);
      }
      throw PoolException.truncated(path, "the header", Format.HEADER_LEN, fileLen);
    }
    if (!Arrays.equals(b, 0, 8, Format.MAGIC, 0, 8)) {
      throw PoolException.notAPool(path);
    }
    int version = Format.u32(b, 8);
    if (version != Format.VERSION) {
      throw PoolException.unsupportedVersion(path, version & 0xffffffffL);
    }
    if (b.length < Format.HEADER_LEN) {
      throw PoolException.truncated(path, "the header", Format.HEADER_LEN, fileLen);
    }
    int stored = Format.u32(b, Format.HEADER_CRC_AT);
    int computed = Format.crc(b, 0, Format.HEADER_CRC_AT);
    if (stored != computed) {
      throw PoolException.headerChecksum(path, stored, computed);
    }
    if (Format.u32(b, 12) != Format.HEADER_LEN) {
      throw PoolException.headerInvalid(path, "header length");
    }
    int pageSize = Format.u32(b, 32);
    if (Integer.bitCount(pageSize) != 1 || Integer.compareUnsigned(pageSize, 4096) < 0) {
      throw PoolException.headerInvalid(path, "page size");
    }
    if (Format.u32(b, 80) != Format.MAX_SECTIONS
        || Format.u32(b, 84) != Format.MAX_ROOTS
        || Format.u64(b, 88) != Format.COMMIT_OFF
        || Format.u64(b, 96) != Format.TABLE_OFF[0]
        || Format.u64(b, 104) != Format.TABLE_OFF[1]) {
      throw PoolException.headerInvalid(path, "metadata layout");
    }
    long dataOff = Format.u64(b, 112);
    if (Long.compareUnsigned(dataOff, Format.METADATA_END) < 0
        || Long.remainderUnsigned(dataOff, pageSize & 0xffffffffL) != 0) {
      throw PoolException.headerInvalid(path, "data offset");
    }
    String kind = Format.strField(b, 48, 80);
    if (kind == null) {
      throw PoolException.headerInvalid(path, "kind tag");
    }
    if (!Format.allZero(b, 120, Format.HEADER_CRC_AT)) {
      throw PoolException.headerInvalid(path, "reserved bytes");
    }
    return new Header(
        getUuid(b, 16), pageSize, Format.u32(b, 36), Format.u64(b, 40), kind, dataOff);
  }

  /** The 16 UUID bytes in order, as RFC 4122 writes them (big-endian halves). */
  private static void putUuid(byte[] b, int at, UUID u) {
    for (int i = 0; i < 8; i++) {
      b[at + i] = (byte) (u.getMostSignificantBits() >>> (56 - 8 * i));
      b[at + 8 + i] = (byte) (u.getLeastSignificantBits() >>> (56 - 8 * i));
    }
  }

  private static UUID getUuid(byte[] b, int at) {
    long msb = 0;
    long lsb = 0;
    for (int i = 0; i < 8; i++) {
      msb = msb << 8 | (b[at + i] & 0xff);
      lsb = lsb << 8 | (b[at + 8 + i] & 0xff);
    }
    return new UUID(msb, lsb);
  }
}
