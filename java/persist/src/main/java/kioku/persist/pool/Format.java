package kioku.persist.pool;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32C;

/**
 * Constants and byte helpers of the pool format, version 1 (docs/pool-format.md). Everything is
 * little-endian and unsigned on media; Java longs and ints hold the unsigned values.
 */
final class Format {
  private Format() {}

  static final byte[] MAGIC = "KIOKUPOL".getBytes(StandardCharsets.US_ASCII);
  static final int VERSION = 1;
  static final int HEADER_LEN = 256;
  static final int HEADER_CRC_AT = HEADER_LEN - 4;
  /** The commit page: the live index at its start, slot 0 and slot 1 after it. */
  static final long COMMIT_OFF = 4096;
  static final long INDEX_OFF = COMMIT_OFF;
  static final int SLOT_LEN = 256;
  static final int SLOT_CRC_AT = SLOT_LEN - 4;
  static final int MAX_ROOTS = 16;
  static final int ENTRY_LEN = 64;
  static final int MAX_SECTIONS = 512;
  static final int TABLE_LEN = MAX_SECTIONS * ENTRY_LEN;
  /** Table {@code i} belongs to slot {@code i}. */
  static final long[] TABLE_OFF = {8192, 8192 + TABLE_LEN};
  static final int MAX_NAME_LEN = 32;
  static final int MAX_KIND_LEN = 32;
  /** End of the fixed metadata; the data area starts here, rounded up to the page size. */
  static final long METADATA_END = 8192 + 2L * TABLE_LEN;
  /**
   * The system page size. kioku runs on x86-64 Linux only (the Rust dax medium refuses to build
   * elsewhere), where it is 4096; Java 17 has no public API to ask.
   */
  static final int PAGE_SIZE = 4096;

  static long slotOff(int i) {
    return COMMIT_OFF + 256L * (i + 1);
  }

  static long dataOff(int pageSize) {
    return roundUp(METADATA_END, pageSize);
  }

  static long roundUp(long v, long to) {
    return (v + to - 1) / to * to;
  }

  /** CRC-32C (Castagnoli) of {@code b[off, off+len)}, as every checksum of the format. */
  static int crc(byte[] b, int off, int len) {
    CRC32C c = new CRC32C();
    c.update(b, off, len);
    return (int) c.getValue();
  }

  static int u32(byte[] b, int at) {
    return (b[at] & 0xff) | (b[at + 1] & 0xff) << 8 | (b[at + 2] & 0xff) << 16
        | (b[at + 3] & 0xff) << 24;
  }

  static long u64(byte[] b, int at) {
    return (u32(b, at) & 0xffffffffL) | (long) u32(b, at + 4) << 32;
  }

  static void putU32(byte[] b, int at, int v) {
    for (int i = 0; i < 4; i++) {
      b[at + i] = (byte) (v >>> (8 * i));
    }
  }

  static void putU64(byte[] b, int at, long v) {
    for (int i = 0; i < 8; i++) {
      b[at + i] = (byte) (v >>> (8 * i));
    }
  }

  static boolean allZero(byte[] b, int from, int to) {
    for (int i = from; i < to; i++) {
      if (b[i] != 0) {
        return false;
      }
    }
    return true;
  }

  /**
   * A NUL-padded UTF-8 string field {@code b[from, to)}, or null when it is not valid UTF-8 or
   * has a non-NUL byte after its first NUL.
   */
  static String strField(byte[] b, int from, int to) {
    int end = from;
    while (end < to && b[end] != 0) {
      end++;
    }
    if (!allZero(b, end, to)) {
      return null;
    }
    try {
      CharBuffer chars = StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(b, from, end - from));
      return chars.toString();
    } catch (CharacterCodingException e) {
      return null;
    }
  }

  static void putStr(byte[] b, int from, int to, String s) {
    byte[] u = s.getBytes(StandardCharsets.UTF_8);
    java.util.Arrays.fill(b, from, to, (byte) 0);
    System.arraycopy(u, 0, b, from, u.length);
  }

  /** A section name or kind tag: 1 to {@code max} bytes of UTF-8, no NUL. */
  static boolean validName(String s, int max) {
    if (s == null || s.isEmpty() || s.indexOf('\0') >= 0) {
      return false;
    }
    int n = s.getBytes(StandardCharsets.UTF_8).length;
    return n <= max;
  }

  /** As Rust's {@code {:#010x}}. */
  static String hex32(int v) {
    return String.format("0x%08x", v);
  }
}
