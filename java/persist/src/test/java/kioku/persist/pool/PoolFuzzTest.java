package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.api.FuzzedDataProvider;
import com.code_intelligence.jazzer.junit.FuzzTest;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * The Java pool reader on damaged and hostile files (Jazzer): a real pool with sections and
 * commits, patched by the input, its checksums optionally set right so mutations get past
 * them, then opened. Opening either succeeds with every section inside the file or fails with
 * a {@link PoolException} — never another exception, a hang or an allocation the file does not
 * justify. The inputs under src/test/resources/…/PoolFuzzTestInputs replay in every test run;
 * {@code JAZZER_FUZZ=1} fuzzes (make fuzz-java).
 */
class PoolFuzzTest {
  private static byte[] template;
  private static Path scratch;

  private static synchronized byte[] template() {
    if (template == null) {
      try {
        Path dir = Files.createTempDirectory("kioku-pool-fuzz");
        dir.toFile().deleteOnExit();
        Path p = dir.resolve("template.pool");
        try (Pool pool = Pool.create(p, "kioku.fuzz", MediumChoice.AUTO)) {
          pool.addSection("a", 2 * 4096, 1);
          pool.commit(new long[] {1, 2});
          pool.addSection("b", 4096, 0);
          pool.commit(new long[] {3});
        }
        template = Files.readAllBytes(p);
        Files.delete(p);
        scratch = dir.resolve("case.pool");
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
    return template;
  }

  @FuzzTest(maxDuration = "5m")
  void openDamagedPool(FuzzedDataProvider in) throws IOException {
    byte[] img = template().clone();
    boolean fix = in.consumeBoolean();
    int patches = in.consumeInt(0, 16);
    for (int i = 0; i < patches; i++) {
      int off = in.consumeInt(0, img.length - 1);
      byte[] b = in.consumeBytes(Math.min(64, img.length - off));
      System.arraycopy(b, 0, img, off, b.length);
    }
    if (fix) {
      fixChecksums(img);
    }
    if (in.consumeBoolean()) {
      img = Arrays.copyOf(img, in.consumeInt(0, img.length));
    }
    Files.deleteIfExists(scratch);
    Files.write(scratch, img);
    try (Pool pool = Pool.open(scratch, MediumChoice.AUTO, true)) {
      for (Section s : pool.sections()) {
        assertTrue(s.offset() >= 0 && s.length() >= 0 && s.offset() + s.length() <= img.length,
            "an accepted section lies outside the file: " + s);
      }
    } catch (PoolException e) {
      // A typed refusal: what damaged input must get.
    }
  }

  /** Sets the header's, both slots' and both section tables' checksums right. */
  private static void fixChecksums(byte[] img) {
    if (img.length < Format.METADATA_END) {
      return;
    }
    ByteBuffer b = ByteBuffer.wrap(img).order(ByteOrder.LITTLE_ENDIAN);
    b.putInt(Format.HEADER_CRC_AT, Format.crc(img, 0, Format.HEADER_CRC_AT));
    for (int i = 0; i < 2; i++) {
      int slot = (int) (Format.COMMIT_OFF + 256L * (i + 1));
      int entries = Math.min(Math.max(b.getInt(slot + 24), 0), Format.MAX_SECTIONS);
      int table = (int) Format.TABLE_OFF[i];
      b.putInt(slot + 28, Format.crc(img, table, entries * Format.ENTRY_LEN));
      b.putInt(slot + Format.SLOT_CRC_AT, Format.crc(img, slot, Format.SLOT_CRC_AT));
    }
  }
}
