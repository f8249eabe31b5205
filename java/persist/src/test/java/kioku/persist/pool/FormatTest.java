package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.Test;

/** The byte-level pieces of the format, against pool-format.md. */
class FormatTest {
  private static final Header HEADER = new Header(
      new UUID(0x0707070707070707L, 0x0707070707070707L), 4096, 2, 1, "kioku.test", 73728);

  @Test
  void crcIsCastagnoli() {
    byte[] b = "123456789".getBytes(StandardCharsets.US_ASCII);
    assertEquals(0xE3069283, Format.crc(b, 0, b.length));
    assertEquals(0, Format.crc(new byte[0], 0, 0));
  }

  @Test
  void layoutConstants() {
    assertEquals(4352, Format.slotOff(0));
    assertEquals(4608, Format.slotOff(1));
    assertEquals(8192, Format.TABLE_OFF[0]);
    assertEquals(40960, Format.TABLE_OFF[1]);
    assertEquals(73728, Format.METADATA_END);
    assertEquals(73728, Format.dataOff(4096));
    assertEquals(131072, Format.dataOff(65536));
  }

  @Test
  void headerRoundTripsAndIsCheckedInOrder() throws Exception {
    byte[] b = HEADER.encode();
    assertEquals(HEADER, Header.decode(b, "p", 100_000));
    byte[] bad = b.clone();
    bad[20] ^= 1;
    expect(PoolException.Reason.HEADER_CHECKSUM, bad);
    bad[8] = 2; // the version is checked before the checksum
    expect(PoolException.Reason.UNSUPPORTED_VERSION, bad);
    bad[0] = 'X'; // and the magic before both
    expect(PoolException.Reason.NOT_A_POOL, bad);
    expect(PoolException.Reason.TRUNCATED, java.util.Arrays.copyOf(b, 100));
    expect(PoolException.Reason.TRUNCATED, java.util.Arrays.copyOf(b, 4));
    expect(PoolException.Reason.NOT_A_POOL, "NOTAPOOL".getBytes(StandardCharsets.US_ASCII));
    // A field with an impossible value under a correct checksum.
    byte[] reserved = b.clone();
    reserved[130] = 1;
    Format.putU32(reserved, 252, Format.crc(reserved, 0, 252));
    PoolException e = expect(PoolException.Reason.HEADER_INVALID, reserved);
    assertTrue(e.getMessage().contains("'reserved bytes'"), e.getMessage());
  }

  private static PoolException expect(PoolException.Reason r, byte[] b) {
    return TestSupport.expect(r, () -> Header.decode(b, "p", b.length));
  }

  @Test
  void slotsDetectEveryTornWord() throws Exception {
    Slot s = new Slot(9, 5, 1 << 20, 2, 3, new long[] {1, 2, 3});
    byte[] b = s.encode();
    Slot back = Slot.decode(b);
    assertEquals(9, back.epoch());
    assertArrayEquals(new long[] {1, 2, 3}, back.roots());
    for (int word = 0; word < Format.SLOT_LEN / 8; word++) {
      byte[] t = b.clone();
      t[word * 8] ^= 0x40;
      int w = word;
      assertThrows(FormatProblem.class, () -> Slot.decode(t), "flipped word " + w);
    }
    assertNull(Slot.decode(new byte[256]), "an all-zero slot is empty");
  }

  @Test
  void tablesRejectOverlapAndBounds() {
    Section a = new Section("a", 73728, 8192, 0);
    Section b = new Section("b", 73728 + 4096, 4096, 0);
    byte[] bytes = SectionTable.encode(List.of(a, b));
    Slot slot = new Slot(1, 0, 1 << 20, 2, Format.crc(bytes, 0, bytes.length), new long[0]);
    FormatProblem p = assertThrows(FormatProblem.class,
        () -> SectionTable.decode(bytes, slot, HEADER));
    assertEquals("sections 'a' and 'b' overlap", p.getMessage());
    byte[] one = SectionTable.encode(List.of(a));
    Slot shortSlot = new Slot(1, 0, 73728 + 4000, 1, Format.crc(one, 0, one.length),
        new long[0]);
    p = assertThrows(FormatProblem.class, () -> SectionTable.decode(one, shortSlot, HEADER));
    assertTrue(p.getMessage().contains("past the committed"), p.getMessage());
  }
}
