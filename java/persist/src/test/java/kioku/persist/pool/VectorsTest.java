package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.io.TempDir;

/**
 * The shared test vectors (tests/vectors): every file must open exactly as vectors.json says,
 * with the file medium on a read-write copy, and opening must not change a byte.
 */
class VectorsTest {
  @TempDir(factory = TestSupport.Durable.class)
  Path dir;

  /** vectors.json's expect strings; an unknown one fails the test. */
  private static final Map<String, PoolException.Reason> REASONS = Map.of(
      "not_a_pool", PoolException.Reason.NOT_A_POOL,
      "unsupported_version", PoolException.Reason.UNSUPPORTED_VERSION,
      "truncated", PoolException.Reason.TRUNCATED,
      "header_checksum", PoolException.Reason.HEADER_CHECKSUM,
      "live_slot_damaged", PoolException.Reason.LIVE_SLOT_DAMAGED,
      "commit_damaged", PoolException.Reason.COMMIT_DAMAGED,
      "page_size_mismatch", PoolException.Reason.PAGE_SIZE_MISMATCH);

  private static JsonNode manifest() throws IOException {
    return new ObjectMapper().readTree(TestSupport.vectorsDir().resolve("vectors.json").toFile());
  }

  @Test
  void manifestIsTheOneWeKnow() throws IOException {
    JsonNode m = manifest();
    assertEquals(1, m.get("format_version").asInt());
    assertEquals(12, m.get("vectors").size(), "vectors.json changed: review this test");
  }

  @TestFactory
  Stream<DynamicTest> everyVectorOpensAsSpecified() throws IOException {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode v : manifest().get("vectors")) {
      String file = v.get("file").asText();
      tests.add(DynamicTest.dynamicTest(file, () -> check(v)));
    }
    return tests.stream();
  }

  private void check(JsonNode v) throws Exception {
    String file = v.get("file").asText();
    Path original = TestSupport.vectorsDir().resolve(file);
    Path copy = dir.resolve("open-" + file);
    Files.copy(original, copy, StandardCopyOption.REPLACE_EXISTING);
    byte[] before = Files.readAllBytes(copy);
    String expect = v.get("expect").asText();
    if (expect.equals("ok")) {
      try (Pool pool = Pool.open(copy, MediumChoice.FILE)) {
        checkOk(v, pool);
      }
      if (v.has("previous_slot")) {
        checkPreviousSlot(v.get("previous_slot"), copy);
      }
    } else {
      PoolException.Reason reason = REASONS.get(expect);
      assertTrue(reason != null, "unknown expect '" + expect + "' in vectors.json");
      PoolException e = TestSupport.expect(reason, () -> Pool.open(copy, MediumChoice.FILE));
      assertTrue(e.getMessage().startsWith(copy.toString() + ": "), e.getMessage());
      if (v.has("found")) {
        assertEquals(v.get("found").asLong(), e.foundVersion().orElseThrow(), file);
      }
      if (v.has("previous_epoch")) {
        assertEquals(v.get("previous_epoch").asLong(), e.previousEpoch().orElseThrow(), file);
      }
      if (v.has("with_rollback")) {
        JsonNode rb = v.get("with_rollback");
        try (Pool pool = Pool.open(copy, MediumChoice.FILE, true)) {
          assertEquals(rb.get("epoch").asLong(), pool.epoch(), file);
          assertArrayEquals(longs(rb.get("roots")), pool.roots(), file);
        }
      } else if (reason == PoolException.Reason.LIVE_SLOT_DAMAGED) {
        // Rolling back is always possible for this error; it must never be taken silently.
        try (Pool pool = Pool.open(copy, MediumChoice.FILE, true)) {
          assertEquals(v.get("previous_epoch").asLong(), pool.epoch(), file);
        }
      }
    }
    assertArrayEquals(before, Files.readAllBytes(copy), file + ": opening changed the file");
  }

  private static void checkOk(JsonNode v, Pool pool) {
    String file = v.get("file").asText();
    assertEquals(v.get("epoch").asLong(), pool.epoch(), file);
    assertEquals(v.get("live_slot").asInt(), pool.liveSlot(), file);
    assertArrayEquals(longs(v.get("roots")), pool.roots(), file);
    assertEquals(MediumKind.FILE, pool.medium().kind());
    if (v.has("uuid")) {
      assertEquals(v.get("uuid").asText(), pool.uuid().toString(), file);
    }
    if (v.has("kind")) {
      assertEquals(v.get("kind").asText(), pool.kind(), file);
    }
    if (v.has("page_size")) {
      assertEquals(v.get("page_size").asInt(), pool.pageSize(), file);
    }
    JsonNode want = v.get("sections");
    assertEquals(want.size(), pool.sections().size(), file);
    for (JsonNode w : want) {
      String name = w.get("name").asText();
      Section s = pool.section(name).orElseThrow(() -> new AssertionError(file + ": " + name));
      assertEquals(w.get("offset").asLong(), s.offset(), name);
      assertEquals(w.get("len").asLong(), s.length(), name);
      assertEquals(w.get("flags").asLong(), Integer.toUnsignedLong(s.flags()), name);
      byte b = (byte) w.get("byte").asText().charAt(0);
      int filled = name.equals("beta") ? 8192 : 4096;
      byte[] data = new byte[(int) s.length()];
      pool.medium().get(s.offset(), data, 0, data.length);
      for (int i = 0; i < data.length; i++) {
        assertEquals(i < filled ? b : 0, data[i], file + ": " + name + " byte " + i);
      }
    }
  }

  /** The other slot is not part of the pool's API; read it the way open does. */
  private static void checkPreviousSlot(JsonNode prev, Path copy) throws Exception {
    byte[] bytes = Files.readAllBytes(copy);
    Examination ex = Examination.examine(bytes.length,
        (off, len) -> Arrays.copyOfRange(bytes, (int) off,
            (int) Math.min(bytes.length, off + len)), copy.toString());
    Examination.SlotState.Intact intact = assertInstanceOf(Examination.SlotState.Intact.class,
        ex.slots().get(prev.get("slot").asInt()));
    assertEquals(prev.get("epoch").asLong(), intact.slot().epoch());
    assertArrayEquals(longs(prev.get("roots")), intact.slot().roots());
  }

  private static long[] longs(JsonNode array) {
    long[] out = new long[array.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = array.get(i).asLong();
    }
    return out;
  }

  @Test
  void vectorsAreNotOnTmpfsCopies() throws IOException {
    assertFalse(TestSupport.isTmpfs(dir), dir + " must not be tmpfs: the file medium refuses it");
  }
}
