package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The simulator's ordering-point model (docs/media.md), one rule at a time. */
class SimMediumTest {
  private static long wordAt(byte[] image, int off) {
    return Format.u64(image, off);
  }

  @Test
  void anUnflushedStoreIsLost() {
    SimMedium sim = SimMedium.create(4096);
    sim.putLong(64, 42);
    sim.drain();
    assertEquals(0, wordAt(sim.crash(CrashMode.DRAINED_ONLY), 64));
    assertEquals(0, wordAt(sim.crash(CrashMode.ALL_FLUSHED), 64));
    for (long seed = 0; seed < 32; seed++) {
      assertEquals(0, wordAt(sim.crash(CrashMode.random(seed, true, false)), 64));
    }
    assertEquals(42, sim.getLong(64), "working memory has it");
  }

  @Test
  void aFlushedAndDrainedStoreIsKept() {
    SimMedium sim = SimMedium.create(4096);
    sim.putLong(64, 42);
    sim.flush(64, 8);
    sim.drain();
    for (CrashMode m : new CrashMode[] {CrashMode.DRAINED_ONLY, CrashMode.ALL_FLUSHED,
        CrashMode.random(1, true, true)}) {
      assertEquals(42, wordAt(sim.crash(m), 64), m.toString());
    }
  }

  @Test
  void aFlushedButUndrainedStoreMayOrMayNotBeThere() {
    SimMedium sim = SimMedium.create(4096);
    sim.putLong(64, 42);
    sim.flush(64, 8);
    assertEquals(1, sim.pendingLines());
    assertEquals(0, wordAt(sim.crash(CrashMode.DRAINED_ONLY), 64));
    assertEquals(42, wordAt(sim.crash(CrashMode.ALL_FLUSHED), 64));
    assertEquals(0, wordAt(sim.crash(CrashMode.exhaustive(0)), 64));
    assertEquals(42, wordAt(sim.crash(CrashMode.exhaustive(1)), 64));
    assertThrows(IllegalArgumentException.class, () -> sim.crash(CrashMode.exhaustive(2)));
    Set<Long> seen = new HashSet<>();
    for (long seed = 0; seed < 32; seed++) {
      seen.add(wordAt(sim.crash(CrashMode.random(seed, false, false)), 64));
    }
    assertEquals(Set.of(0L, 42L), seen);
  }

  @Test
  void aStoreAfterTheFlushMakesTheLineUnflushedAgain() {
    SimMedium sim = SimMedium.create(4096);
    sim.putLong(0, 1);
    sim.flush(0, 8);
    sim.putLong(8, 2); // same line, after its flush
    sim.drain();
    byte[] drained = sim.crash(CrashMode.DRAINED_ONLY);
    assertEquals(1, wordAt(drained, 0));
    assertEquals(0, wordAt(drained, 8), "a real clwb wrote back what the line held then");
    // Only a cache eviction can bring the later store to media.
    Set<Long> seen = new HashSet<>();
    for (long seed = 0; seed < 32; seed++) {
      assertEquals(0, wordAt(sim.crash(CrashMode.random(seed, true, false)), 8));
      seen.add(wordAt(sim.crash(CrashMode.random(seed, true, true)), 8));
    }
    assertEquals(Set.of(0L, 2L), seen);
  }

  @Test
  void aLineFlushedTwiceKeepsTheLaterContent() {
    SimMedium sim = SimMedium.create(4096);
    sim.putLong(0, 1);
    sim.flush(0, 8);
    sim.putLong(0, 2);
    sim.flush(0, 8);
    assertEquals(1, sim.pendingLines());
    assertEquals(2, wordAt(sim.crash(CrashMode.ALL_FLUSHED), 0));
    sim.drain();
    assertEquals(2, wordAt(sim.persisted(), 0));
  }

  @Test
  void tornLinesKeepWholeWords() {
    SimMedium sim = SimMedium.create(4096);
    for (int w = 0; w < 8; w++) {
      sim.putLong(128 + 8 * w, -1L);
    }
    sim.flush(128, 64);
    boolean mixed = false;
    for (long seed = 0; seed < 32; seed++) {
      byte[] img = sim.crash(CrashMode.random(seed, true, false));
      int kept = 0;
      for (int w = 0; w < 8; w++) {
        long v = wordAt(img, 128 + 8 * w);
        assertTrue(v == 0 || v == -1L, "a word is all old or all new");
        kept += v == -1L ? 1 : 0;
      }
      mixed |= kept > 0 && kept < 8;
    }
    assertTrue(mixed, "tearWords decides each word on its own");
  }

  @Test
  void everyFlushAndDrainIsAnOrderingPointAndTheCutStopsDurability() {
    SimMedium sim = SimMedium.create(4096);
    AtomicInteger runs = new AtomicInteger();
    AtomicLong pointsAtCut = new AtomicLong(-1);
    sim.cutPowerAt(3);
    sim.setOnCut(() -> {
      runs.incrementAndGet();
      pointsAtCut.set(sim.orderingPoints());
    });
    sim.putLong(0, 1);
    sim.persist(0, 8); // points 0, 1
    sim.putLong(8, 2);
    sim.flush(8, 8); // point 2
    assertEquals(0, runs.get());
    sim.drain(); // point 3: the cut — this drain does not happen
    sim.putLong(16, 3);
    sim.persist(16, 8); // points 4, 5
    assertEquals(6, sim.orderingPoints());
    assertEquals(1, runs.get(), "onCut runs once");
    assertEquals(4, pointsAtCut.get(), "onCut runs when point 3 is reached");
    assertEquals(3, sim.powerCutPoint().orElseThrow());
    byte[] drained = sim.crash(CrashMode.DRAINED_ONLY);
    assertEquals(1, wordAt(drained, 0));
    assertEquals(0, wordAt(drained, 8), "the drain at the cut did not happen");
    assertEquals(0, wordAt(drained, 16), "nothing after the cut is durable");
    assertEquals(2, wordAt(sim.crash(CrashMode.ALL_FLUSHED), 8), "pending at the cut");
    assertEquals(0, wordAt(sim.crash(CrashMode.ALL_FLUSHED), 16));
  }

  @Test
  void evictionAfterTheCutSeesWorkingMemoryAtTheCut() {
    SimMedium sim = SimMedium.create(4096);
    sim.cutPowerAt(0);
    sim.drain(); // the cut
    sim.putLong(0, 7); // after the power is gone: in no image
    for (long seed = 0; seed < 16; seed++) {
      assertEquals(0, wordAt(sim.crash(CrashMode.random(seed, false, true)), 0));
    }
  }

  @Test
  void growBeforeTheCutIsDurableAfterItIsNot() throws Exception {
    SimMedium sim = SimMedium.create(4096);
    sim.grow(8192);
    assertEquals(8192, sim.crash(CrashMode.DRAINED_ONLY).length);
    sim.cutPowerNow();
    sim.grow(16384);
    assertEquals(16384, sim.length());
    assertEquals(8192, sim.crash(CrashMode.DRAINED_ONLY).length);
    TestSupport.expect(PoolException.Reason.OUT_OF_RANGE, () -> sim.grow(4096));
  }

  @Test
  void rangesAreChecked() {
    SimMedium sim = SimMedium.create(4096);
    assertThrows(IndexOutOfBoundsException.class, () -> sim.flush(4090, 8));
    assertThrows(IndexOutOfBoundsException.class, () -> sim.getLong(4096));
    assertThrows(IndexOutOfBoundsException.class, () -> sim.putLong(1L << 33, 1));
    SimMedium empty = SimMedium.create(0);
    empty.flush(0, 0);
    empty.drain();
    assertThrows(IndexOutOfBoundsException.class, () -> empty.flush(0, 1));
  }

  @Test
  void imagesRoundTripThroughFiles(@TempDir Path dir) throws Exception {
    SimMedium sim = SimMedium.create(8192);
    sim.putLong(4096, 99);
    sim.persist(4096, 8);
    Path img = dir.resolve("image.bin");
    SimMedium.saveImage(img, sim.crash(CrashMode.DRAINED_ONLY));
    SimMedium back = SimMedium.load(img);
    assertEquals(99, back.getLong(4096));
    assertArrayEquals(sim.persisted(), back.persisted());
    assertEquals(0, back.orderingPoints());
    TestSupport.expect(PoolException.Reason.IO, () -> SimMedium.load(dir.resolve("none")));
  }
}
