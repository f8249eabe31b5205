package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Creating, changing, committing and reopening pool files; both ways with the Rust CLI. */
class PoolTest {
  @TempDir(factory = TestSupport.Durable.class)
  Path dir;

  private static void write(Pool pool, Section s, long seed) {
    byte[] b = new byte[(int) s.length()];
    for (int i = 0; i < b.length; i++) {
      b[i] = TestSupport.fill(seed, i);
    }
    pool.medium().put(s.offset(), b, 0, b.length);
    pool.medium().flush(s.offset(), s.length());
  }

  private static void assertContent(Pool pool, Section s, long seed) {
    byte[] b = new byte[(int) s.length()];
    pool.medium().get(s.offset(), b, 0, b.length);
    for (int i = 0; i < b.length; i++) {
      assertEquals(TestSupport.fill(seed, i), b[i], s.name() + " byte " + i);
    }
  }

  private static boolean isZero(Pool pool, Section s) {
    byte[] b = new byte[(int) s.length()];
    pool.medium().get(s.offset(), b, 0, b.length);
    for (byte x : b) {
      if (x != 0) {
        return false;
      }
    }
    return true;
  }

  private List<String> dirListing() throws IOException {
    try (Stream<Path> s = Files.list(dir)) {
      return s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
    }
  }

  @Test
  void createsAFreshPool() throws Exception {
    Path path = dir.resolve("fresh.pool");
    try (Pool pool = Pool.create(path, "kioku.test", MediumChoice.FILE)) {
      assertEquals("kioku.test", pool.kind());
      assertEquals(0, pool.epoch());
      assertEquals(0, pool.liveSlot());
      assertArrayEquals(new long[0], pool.roots());
      assertEquals(List.of(), pool.sections());
      assertEquals(4096, pool.pageSize());
      assertEquals(4, pool.uuid().version());
      assertEquals(2, pool.uuid().variant());
      assertEquals(73728, pool.medium().length());
      assertEquals(MediumKind.FILE, pool.medium().kind());
      assertEquals(path, pool.path());
    }
    assertEquals(List.of("fresh.pool"), dirListing(), "no temporary name is left");
    byte[] b = Files.readAllBytes(path);
    assertEquals(73728, b.length);
    assertEquals("KIOKUPOL", new String(b, 0, 8, StandardCharsets.US_ASCII));
    assertEquals(MediumKind.FILE.code(), Format.u32(b, 36));
  }

  @Test
  void roundTripsSectionsAndRoots() throws Exception {
    Path path = dir.resolve("rt.pool");
    try (Pool pool = Pool.create(path, "kioku.test", MediumChoice.FILE)) {
      Section a = pool.addSection("alpha", 5000, 7);
      assertEquals(new Section("alpha", 73728, 8192, 7), a);
      assertTrue(isZero(pool, a));
      Section b = pool.addSection("beta", 4096, 0x8000_0000);
      assertEquals(73728 + 8192, b.offset());
      write(pool, a, 1);
      write(pool, b, 2);
      assertEquals(0, pool.committedSections().size(), "not visible before the commit");
      pool.commit(new long[] {1, 2, 3});
      assertEquals(1, pool.epoch());
      assertEquals(1, pool.liveSlot());
    }
    try (Pool pool = Pool.open(path, MediumChoice.FILE)) {
      assertEquals(1, pool.epoch());
      assertArrayEquals(new long[] {1, 2, 3}, pool.roots());
      assertEquals(List.of(new Section("alpha", 73728, 8192, 7),
          new Section("beta", 81920, 4096, 0x8000_0000)), pool.sections());
      assertContent(pool, pool.section("alpha").orElseThrow(), 1);
      assertContent(pool, pool.section("beta").orElseThrow(), 2);

      // alpha's space stays busy while the live commit names it ...
      pool.removeSection("alpha");
      Section c = pool.addSection("gamma", 4096, 0);
      assertEquals(81920 + 4096, c.offset());
      write(pool, c, 3);
      pool.commit(new long[] {-1L});
      // ... and is reused, zeroed, once a commit no longer names it.
      Section d = pool.addSection("delta", 8192, 0);
      assertEquals(73728, d.offset());
      assertTrue(isZero(pool, d), "reused space is zeroed");
      pool.commit(new long[0]);
    }
    try (Pool pool = Pool.open(path, MediumChoice.AUTO, "kioku.test", false)) {
      assertEquals(3, pool.epoch());
      assertEquals(1, pool.liveSlot());
      assertArrayEquals(new long[0], pool.roots());
      assertEquals(List.of("beta", "gamma", "delta"),
          pool.sections().stream().map(Section::name).collect(Collectors.toList()));
      assertContent(pool, pool.section("gamma").orElseThrow(), 3);
    }
  }

  @Test
  void growsTheFileForSectionsAndRecordsTheLength() throws Exception {
    Path path = dir.resolve("grow.pool");
    try (Pool pool = Pool.create(path, "kioku.test", MediumChoice.FILE)) {
      Section big = pool.addSection("big", 3 << 20, 0);
      assertEquals(73728 + (3 << 20), pool.medium().length());
      write(pool, big, 9);
      pool.commit(new long[] {9});
    }
    assertEquals(73728 + (3 << 20), Files.size(path));
    try (Pool pool = Pool.open(path, MediumChoice.FILE)) {
      assertContent(pool, pool.section("big").orElseThrow(), 9);
    }
  }

  @Test
  void refusesWhatItMustRefuse() throws Exception {
    Path path = dir.resolve("p.pool");
    Pool.create(path, "kioku.test", MediumChoice.FILE).close();
    byte[] before = Files.readAllBytes(path);
    PoolException e = TestSupport.expect(PoolException.Reason.ALREADY_EXISTS,
        () -> Pool.create(path, "kioku.test", MediumChoice.FILE));
    assertTrue(e.getMessage().startsWith(path + ": "), e.getMessage());
    assertArrayEquals(before, Files.readAllBytes(path), "an existing file is never touched");

    Path other = Files.writeString(dir.resolve("notes.txt"), "hello");
    TestSupport.expect(PoolException.Reason.ALREADY_EXISTS,
        () -> Pool.create(other, "kioku.test", MediumChoice.FILE));
    assertEquals("hello", Files.readString(other));

    TestSupport.expect(PoolException.Reason.NOT_FOUND,
        () -> Pool.open(dir.resolve("missing.pool"), MediumChoice.AUTO));
    // Shorter than the version field and not provably foreign: truncated, as on the Rust side.
    TestSupport.expect(PoolException.Reason.TRUNCATED, () -> Pool.open(other, MediumChoice.AUTO));
    Path text = Files.writeString(dir.resolve("text.txt"), "certainly not a pool");
    TestSupport.expect(PoolException.Reason.NOT_A_POOL, () -> Pool.open(text, MediumChoice.AUTO));
    TestSupport.expect(PoolException.Reason.WRONG_KIND,
        () -> Pool.open(path, MediumChoice.AUTO, "kioku.other", false));

    try (Pool pool = Pool.open(path, MediumChoice.FILE)) {
      assertThrows(IllegalArgumentException.class, () -> pool.addSection("", 1, 0));
      assertThrows(IllegalArgumentException.class, () -> pool.addSection("x".repeat(33), 1, 0));
      assertThrows(IllegalArgumentException.class, () -> pool.addSection("a\0b", 1, 0));
      pool.addSection("x".repeat(32), 1, 0);
      assertThrows(IllegalArgumentException.class, () -> pool.addSection("x".repeat(32), 1, 0));
      assertThrows(IllegalArgumentException.class, () -> pool.removeSection("nope"));
      assertThrows(IllegalArgumentException.class, () -> pool.commit(new long[17]));
    }
    assertThrows(IllegalArgumentException.class,
        () -> Pool.create(dir.resolve("k.pool"), "", MediumChoice.FILE));
    assertEquals(List.of("notes.txt", "p.pool", "text.txt"), dirListing());
  }

  @Test
  void theTableHoldsAtMost512Sections() throws Exception {
    try (Pool pool = Pool.create(SimMedium.create(0), "kioku.test")) {
      for (int i = 0; i < 512; i++) {
        pool.addSection("s" + i, 4096, i);
      }
      TestSupport.expect(PoolException.Reason.TABLE_FULL, () -> pool.addSection("one-more", 1, 0));
      pool.commit(new long[] {512});
      try (Pool again = Pool.open(SimMedium.fromImage(((SimMedium) pool.medium()).working()))) {
        assertEquals(512, again.sections().size());
        assertEquals(new Section("s511", 73728 + 511L * 4096, 4096, 511),
            again.section("s511").orElseThrow());
      }
    }
  }

  // ---- with the Rust side --------------------------------------------------------------------

  private static Path kioku() {
    var bin = TestSupport.kiokuBinary();
    Assumptions.assumeTrue(bin.isPresent(),
        "SKIPPED: the Rust CLI target/{release,debug}/kioku is missing (looked"
        + " upwards from " + TestSupport.vectorsDir() + "); build it with"
        + " `cargo test --workspace --no-run` to check Java pools against the Rust reader");
    return bin.get();
  }

  private record Run(int exit, String out) {}

  private static Run run(String... cmd) throws Exception {
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(60, TimeUnit.SECONDS), "timed out: " + String.join(" ", cmd));
    return new Run(p.exitValue(), out);
  }

  @Test
  void rustReadsAJavaPool() throws Exception {
    Path bin = kioku();
    Path path = dir.resolve("java-made.pool");
    String uuid;
    try (Pool pool = Pool.create(path, "kioku.java", MediumChoice.FILE)) {
      uuid = pool.uuid().toString();
      write(pool, pool.addSection("alpha", 4096, 1), 1);
      pool.commit(new long[] {1, 2, 3});
      write(pool, pool.addSection("beta", 12288, 0x8000_0000), 2);
      pool.commit(new long[] {0xDEADBEEFL, 42, -1L});
    }
    Run r = run(bin.toString(), "pool", "inspect", path.toString(), "--json");
    assertEquals(0, r.exit(), r.out());
    JsonNode j = new ObjectMapper().readTree(r.out());
    assertEquals("healthy", j.get("summary").asText());
    JsonNode h = j.get("header");
    assertEquals(1, h.get("version").asInt());
    assertEquals(uuid, h.get("uuid").asText());
    assertEquals("kioku.java", h.get("kind").asText());
    assertEquals(4096, h.get("page_size").asInt());
    assertEquals("file", h.get("created_medium").asText());
    assertEquals(73728, h.get("data_off").asLong());
    assertEquals(0, j.get("live_index").asInt());
    JsonNode live = j.get("slots").get(0);
    assertEquals("live", live.get("role").asText());
    assertEquals("intact", live.get("state").asText());
    assertEquals(2, live.get("slot").get("epoch").asLong());
    assertEquals(Files.size(path), live.get("slot").get("pool_len").asLong());
    JsonNode roots = live.get("slot").get("roots");
    assertEquals(3, roots.size());
    assertEquals("3735928559", roots.get(0).asText());
    assertEquals("18446744073709551615", roots.get(2).asText());
    JsonNode secs = live.get("sections");
    assertEquals(2, secs.size());
    assertEquals("beta", secs.get(1).get("name").asText());
    assertEquals(77824, secs.get(1).get("offset").asLong());
    assertEquals(12288, secs.get(1).get("len").asLong());
    assertEquals(2147483648L, secs.get(1).get("flags").asLong());
    JsonNode prev = j.get("slots").get(1);
    assertEquals("previous", prev.get("role").asText());
    assertEquals(1, prev.get("slot").get("epoch").asLong());
  }

  @Test
  void javaReadsARustPool() throws Exception {
    Path bin = kioku();
    Path path = dir.resolve("rust-made.pool");
    Run made = run(bin.toString(), "pool", "create", path.toString(), "--medium", "file",
        "--kind", "kioku.rust", "--size", "8192");
    assertEquals(0, made.exit(), made.out());
    try (Pool pool = Pool.open(path, MediumChoice.FILE, "kioku.rust", false)) {
      assertEquals(0, pool.epoch());
      assertEquals(0, pool.liveSlot());
      assertEquals(List.of(), pool.sections());
      assertEquals(73728 + 8192, pool.medium().length());
      // The reserved data area is free space: the first section goes there.
      Section s = pool.addSection("from-java", 4096, 5);
      assertEquals(73728, s.offset());
      write(pool, s, 5);
      pool.commit(new long[] {7});
    }
    Run r = run(bin.toString(), "pool", "inspect", path.toString(), "--json");
    assertEquals(0, r.exit(), r.out());
    JsonNode j = new ObjectMapper().readTree(r.out());
    assertTrue(j.get("held_by").isNull(), "no holder after close: " + j.get("held_by"));
    JsonNode live = j.get("slots").get(1);
    assertEquals("live", live.get("role").asText());
    assertEquals(1, live.get("slot").get("epoch").asLong());
    assertEquals("from-java", live.get("sections").get(0).get("name").asText());
  }
}
