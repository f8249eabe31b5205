package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Choosing a medium, and what each medium refuses; the file medium's windows. */
class MediaTest {
  @TempDir(factory = TestSupport.Durable.class)
  Path dir;

  /** A private directory in /dev/shm (tmpfs), removed after each test. */
  private Path shm;

  @BeforeEach
  void makeShmDir() throws IOException {
    Path devShm = Path.of("/dev/shm");
    if (Files.isDirectory(devShm) && TestSupport.isTmpfs(devShm)) {
      shm = Files.createTempDirectory(devShm, "kioku-pool-test-");
    }
  }

  @AfterEach
  void removeShmDir() throws IOException {
    if (shm != null) {
      try (Stream<Path> s = Files.list(shm)) {
        for (Path p : s.collect(Collectors.toList())) {
          Files.delete(p);
        }
      }
      Files.delete(shm);
    }
  }

  private Path shmDir() {
    Assumptions.assumeTrue(shm != null, "SKIPPED: /dev/shm is not a tmpfs directory here");
    return shm;
  }

  private static Path file(Path dir, String name, int len) throws IOException {
    return Files.write(dir.resolve(name), new byte[len]);
  }

  private static List<String> listing(Path d) throws IOException {
    try (Stream<Path> s = Files.list(d)) {
      return s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
    }
  }

  @Test
  void autoGivesShmOnTmpfsAndFileOnDisk() throws Exception {
    try (Medium m = Media.open(file(shmDir(), "a.bin", 8192), MediumChoice.AUTO)) {
      assertEquals(MediumKind.SHM, m.kind());
      assertTrue(m.durability().contains("NOT power loss"), m.durability());
    }
    try (Medium m = Media.open(file(dir, "a.bin", 8192), MediumChoice.AUTO)) {
      assertEquals(MediumKind.FILE, m.kind(), "no pmem here: dax is refused, disk gives file");
    }
    assertEquals(List.of("a.bin"), listing(dir), "probing MAP_SYNC leaves nothing behind");
  }

  @Test
  void eachMediumRefusesTheWrongPlace() throws Exception {
    Path onShm = file(shmDir(), "a.bin", 8192);
    Path onDisk = file(dir, "a.bin", 8192);
    PoolException e = TestSupport.expect(PoolException.Reason.TMPFS_NOT_DURABLE,
        () -> Media.open(onShm, MediumChoice.FILE));
    assertTrue(e.getMessage().startsWith(onShm + ": "), e.getMessage());
    TestSupport.expect(PoolException.Reason.TMPFS_NOT_DURABLE, () -> new FileMedium(onShm));
    e = TestSupport.expect(PoolException.Reason.NOT_TMPFS,
        () -> Media.open(onDisk, MediumChoice.SHM));
    assertTrue(e.getMessage().contains("--medium file"), e.getMessage());
    TestSupport.expect(PoolException.Reason.NOT_TMPFS, () -> new ShmMedium(onDisk));
  }

  /**
   * A scan reader (recovery's) reads what the medium holds through its own 4 MiB windows, at
   * most 8 mapped at once: across more windows than that, back and forth, in words, runs of
   * words straddling a window's end, bytes, and stores made through the medium after it
   * mapped a window; and it leaves the pages it read unmapped (the process's shared RSS falls
   * back when it moves on and when it closes).
   */
  @Test
  void scanReadsSeeTheMediumThroughWindowsItUnmaps() throws Exception {
    int len = 48 << 20; // 12 windows
    Path f = file(shmDir(), "scan.bin", len);
    try (Medium m = Media.open(f, MediumChoice.SHM)) {
      for (long off = 0; off < len; off += 8) m.putLong(off, off * 0x9E3779B97F4A7C15L);
      long before = rssShmemKiB();
      ScanReads r = m.scanReads();
      long[] got = new long[64];
      long[] want = new long[64];
      for (long off = 0; off < len; off += 4096) { // every page, so every window
        assertEquals(m.getLong(off), r.getLong(off), "word at " + off);
      }
      long afterPass = rssShmemKiB();
      for (long off : new long[] {(4L << 20) - 256, 0, (44L << 20) - 8, len - 512}) {
        r.getLongs(off, got, 0, 64); // the first and third straddle a window's end
        m.getLongs(off, want, 0, 64);
        assertArrayEquals(want, got, "words from " + off);
        assertEquals(m.getInt(off + 4), r.getInt(off + 4));
        assertEquals(m.getShort(off + 2), r.getShort(off + 2));
        assertEquals(m.getByte(off + 7), r.getByte(off + 7));
        byte[] a = new byte[300];
        byte[] b = new byte[300];
        r.get(off + 3, a, 0, 300);
        m.get(off + 3, b, 0, 300);
        assertArrayEquals(b, a, "bytes from " + (off + 3));
      }
      m.putLong(len - 512, 42); // its window is mapped now: the store shows through it
      assertEquals(42, r.getLong(len - 512));
      r.close();
      long afterClose = rssShmemKiB();
      if (before >= 0) {
        // 48 MiB read, at most 8 windows of 4 MiB mapped at a time (the medium's own mapping
        // was filled before `before`).
        assertTrue(afterPass - before <= 33 << 10, before + " -> " + afterPass + " KiB");
        assertTrue(afterClose - before <= 1 << 10, before + " -> " + afterClose + " KiB");
      }
    }
  }

  /**
   * A scan in the file's order maps each window once and keeps its windows; one that jumps
   * between windows (a relinked heap) reads through the medium once it has mapped {@code
   * REMAPS} times the file's windows, and reads the same words either way.
   */
  @Test
  void scanReadsOutOfOrderFallBackToTheMedium() throws Exception {
    int len = 48 << 20; // 12 windows
    Path f = file(shmDir(), "jumps.bin", len);
    try (Medium m = Media.open(f, MediumChoice.SHM)) {
      for (long off = 0; off < len; off += 4096) m.putLong(off, off * 0x9E3779B97F4A7C15L);
      try (ScanReads r = m.scanReads()) {
        for (int pass = 0; pass < 2; pass++) {
          for (long off = 0; off < len; off += 4096) assertEquals(m.getLong(off), r.getLong(off));
        }
        assertFalse(((WindowedScan) r).throughMedium(), "two passes in order: 24 mappings");
      }
      try (ScanReads r = m.scanReads()) {
        java.util.Random rnd = new java.util.Random(3);
        long[] got = new long[4];
        long[] want = new long[4];
        int reads = 12 * WindowedScan.REMAPS * 16; // about a third miss the 8 windows kept
        for (int i = 0; i < reads; i++) {
          long off = 4096L * rnd.nextInt(len / 4096);
          assertEquals(m.getLong(off), r.getLong(off), "word at " + off);
          r.getLongs(off, got, 0, 4);
          m.getLongs(off, want, 0, 4);
          assertArrayEquals(want, got, "words from " + off);
        }
        assertTrue(((WindowedScan) r).throughMedium(), reads + " reads in random windows");
      }
    }
  }

  /** The process's resident pages of shared memory (tmpfs mappings), or -1 if not shown. */
  private static long rssShmemKiB() throws IOException {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith("RssShmem:")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
    }
    return -1;
  }

  @Test
  void daxIsRefusedCleanlyWithoutPmem() throws Exception {
    for (Path d : new Path[] {dir, shmDir()}) {
      Path f = file(d, "a.bin", 8192);
      PoolException e = TestSupport.expect(PoolException.Reason.DAX_UNSUPPORTED,
          () -> Media.open(f, MediumChoice.DAX));
      assertTrue(e.getMessage().startsWith(f + ": the filesystem does not support MAP_SYNC"),
          e.getMessage());
      TestSupport.expect(PoolException.Reason.DAX_UNSUPPORTED, () -> new DaxMedium(f));
      Path empty = file(d, "empty.bin", 0);
      TestSupport.expect(PoolException.Reason.DAX_UNSUPPORTED, () -> new DaxMedium(empty));
      assertEquals(0, Files.size(empty), "probing never extends the file");
      assertEquals(List.of("a.bin", "empty.bin"), listing(d));
      // The file is usable afterwards: the refusal left no lock or mapping behind.
      try (Medium m = Media.open(f, MediumChoice.AUTO)) {
        m.putLong(0, 1);
      }
    }
  }

  @Test
  void poolsFollowTheMediumChoice() throws Exception {
    Path onShm = shmDir().resolve("s.pool");
    try (Pool pool = Pool.create(onShm, "kioku.test", MediumChoice.AUTO)) {
      assertEquals(MediumKind.SHM, pool.medium().kind());
      pool.commit(new long[] {1});
    }
    assertEquals(MediumKind.SHM.code(), Format.u32(Files.readAllBytes(onShm), 36));
    try (Pool pool = Pool.open(onShm, MediumChoice.SHM)) {
      assertEquals(1, pool.epoch());
    }
    TestSupport.expect(PoolException.Reason.TMPFS_NOT_DURABLE,
        () -> Pool.open(onShm, MediumChoice.FILE));
    TestSupport.expect(PoolException.Reason.TMPFS_NOT_DURABLE,
        () -> Pool.create(shm.resolve("f.pool"), "kioku.test", MediumChoice.FILE));
    TestSupport.expect(PoolException.Reason.DAX_UNSUPPORTED,
        () -> Pool.create(dir.resolve("d.pool"), "kioku.test", MediumChoice.DAX));
    TestSupport.expect(PoolException.Reason.NOT_TMPFS,
        () -> Pool.create(dir.resolve("n.pool"), "kioku.test", MediumChoice.SHM));
    assertEquals(List.of("s.pool"), listing(shm), "a refused creation leaves nothing");
    assertEquals(List.of(), listing(dir), "a refused creation leaves nothing");
  }

  @Test
  void parsesChoices() {
    assertEquals(MediumChoice.AUTO, MediumChoice.parse("auto"));
    assertEquals(MediumChoice.DAX, MediumChoice.parse("dax"));
    assertEquals(MediumChoice.FILE, MediumChoice.parse(" File "));
    assertEquals(MediumChoice.SHM, MediumChoice.parse("shm"));
    IllegalArgumentException sim = assertThrows(IllegalArgumentException.class,
        () -> MediumChoice.parse("sim"));
    assertTrue(sim.getMessage().contains("SimMedium"), sim.getMessage());
    assertThrows(IllegalArgumentException.class, () -> MediumChoice.exactly(MediumKind.SIM));
    IllegalArgumentException bad = assertThrows(IllegalArgumentException.class,
        () -> MediumChoice.parse("tape"));
    assertEquals("unknown medium 'tape' (choose auto, dax, file or shm)", bad.getMessage());
    assertEquals(MediumChoice.SHM, MediumChoice.exactly(MediumKind.SHM));
    assertEquals(MediumKind.FILE, MediumChoice.FILE.kind());
    assertEquals(null, MediumChoice.AUTO.kind());
    assertEquals(List.of(1, 2, 3, 4), Stream.of(MediumKind.values()).map(MediumKind::code)
        .collect(Collectors.toList()));
    assertEquals(MediumKind.SHM, MediumKind.fromCode(3));
    assertEquals(null, MediumKind.fromCode(9));
  }

  @Test
  void fileWindowsCarryAccessesAcrossTheirBoundaries() throws Exception {
    Path f = file(dir, "w.bin", 10_000); // windows of 4096: 4096 + 4096 + 1808
    try (FileMedium m = new FileMedium(f, 4096)) {
      assertEquals(10_000, m.length());
      m.putLong(4088, 0x0102030405060708L);
      m.putLong(4096, -2L);
      assertEquals(0x0102030405060708L, m.getLong(4088), "last word of window 0");
      assertEquals(-2L, m.getLong(4096), "first word of window 1");
      m.putByte(4095, (byte) 9);
      assertEquals((byte) 9, m.getByte(4095));
      assertEquals(0x0902030405060708L, m.getLong(4088), "little-endian");
      byte[] span = new byte[9000];
      for (int i = 0; i < span.length; i++) {
        span[i] = (byte) (i * 31);
      }
      m.put(500, span, 0, span.length);
      m.putInt(8188, 77);
      m.putShort(9998, (short) 5);
      span[8188 - 500] = 77;
      span[8189 - 500] = 0;
      span[8190 - 500] = 0;
      span[8191 - 500] = 0;
      byte[] back = new byte[9000];
      m.get(500, back, 0, back.length);
      assertArrayEquals(span, back);
      assertEquals(77, m.getInt(8188));
      assertEquals((short) 5, m.getShort(9998));
      assertThrows(IndexOutOfBoundsException.class, () -> m.getLong(10_000));
      assertThrows(IndexOutOfBoundsException.class, () -> m.get(9000, back, 0, 1001));
      m.persist(0, m.length());

      // Growing remaps the partial last window; what was there stays.
      m.grow(20_000);
      assertEquals(20_000, m.length());
      assertArrayEquals(span, readBack(m, 500, 9000));
      m.putLong(16_384, 99);
      m.putLong(9992, 12);
      assertEquals(99, m.getLong(16_384));
      m.persist(9992, 8);
      m.persist(16_384, 8);
      TestSupport.expect(PoolException.Reason.OUT_OF_RANGE, () -> m.grow(100));
    }
    byte[] file = Files.readAllBytes(f);
    assertEquals(20_000, file.length);
    ByteBuffer b = ByteBuffer.wrap(file).order(ByteOrder.LITTLE_ENDIAN);
    assertEquals(99, b.getLong(16_384));
    assertEquals(12, b.getLong(9992));
    assertEquals((byte) (1000 * 31), file[1500], "little-endian, at the same offsets");
  }

  @Test
  void bulkWordReadsGiveWhatWordByWordReadsGive() throws Exception {
    Path f = file(dir, "l.bin", 10_000); // windows of 4096: 4096 + 4096 + 1808
    try (FileMedium m = new FileMedium(f, 4096)) {
      for (long off = 0; off + 8 <= 10_000; off += 8) m.putLong(off, off * 0x9E3779B97F4A7C15L);
      // Inside a window, across a boundary, in the partial last window, unaligned.
      long[][] cases = {{64, 7}, {4072, 5}, {8192, 226}, {9984, 2}, {4, 3}};
      for (long[] c : cases) {
        int n = (int) c[1];
        long[] got = new long[n + 2];
        m.getLongs(c[0], got, 1, n);
        for (int i = 0; i < n; i++) {
          assertEquals(m.getLong(c[0] + 8L * i), got[1 + i], "word " + i + " from " + c[0]);
        }
        assertEquals(0, got[0], "nothing before dstOff");
        assertEquals(0, got[n + 1], "nothing after n words");
      }
      assertThrows(IndexOutOfBoundsException.class, () -> m.getLongs(9992, new long[2], 0, 2));
      // Growing remaps the partial last window: bulk reads see the new length.
      m.grow(20_000);
      m.putLong(12_280, 42);
      long[] got = new long[3];
      m.getLongs(12_272, got, 0, 3);
      assertEquals(m.getLong(12_272), got[0]);
      assertEquals(42, got[1]);
      assertEquals(0, got[2]);
    }
  }

  private static byte[] readBack(Medium m, long off, int len) {
    byte[] b = new byte[len];
    m.get(off, b, 0, len);
    return b;
  }

  @Test
  void fileFlushesCoalesceUntilTheDrain() throws Exception {
    try (FileMedium m = new FileMedium(file(dir, "c.bin", 64 * 4096), 8192)) {
      m.flush(0, 8);
      m.flush(4000, 200); // pages 0 and 1: joins
      m.flush(8192, 1); // adjacent: joins
      assertEquals(1, m.pendingRanges());
      m.flush(40_000, 10);
      assertEquals(2, m.pendingRanges());
      m.flush(12_288, 40_000 - 12_288); // fills the gap
      assertEquals(1, m.pendingRanges());
      m.flush(0, 0);
      assertEquals(1, m.pendingRanges());
      m.drain();
      assertEquals(0, m.pendingRanges());
      assertThrows(IndexOutOfBoundsException.class, () -> m.flush(64 * 4096 - 4, 8));
    }
  }

  @Test
  void anEmptyFileMapsNothingUntilItGrows() throws Exception {
    Path f = file(dir, "empty.bin", 0);
    try (Medium m = Media.open(f, MediumChoice.FILE)) {
      assertEquals(0, m.length());
      m.flush(0, 0);
      m.drain();
      assertThrows(IndexOutOfBoundsException.class, () -> m.flush(0, 1));
      assertThrows(RuntimeException.class, () -> m.getLong(0));
      m.grow(8192);
      m.putLong(4096, 3);
      m.persist(4096, 8);
    }
    assertEquals(8192, Files.size(f));
    TestSupport.expect(PoolException.Reason.NOT_FOUND,
        () -> Media.open(dir.resolve("none"), MediumChoice.AUTO));
  }

  @Test
  void aClosedMediumRefusesAccess() throws Exception {
    Medium m = Media.open(file(dir, "x.bin", 4096), MediumChoice.FILE);
    m.close();
    assertThrows(RuntimeException.class, () -> m.putLong(0, 1));
    assertFalse(m.length() > 0);
  }
}
