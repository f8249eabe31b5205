package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Crash consistency of creation, addSection and commit: the power of the simulator is cut at
 * every ordering point of a workload, and every image the cut could leave must open to the
 * complete previous or the complete new commit (sections, contents, roots) — never an error.
 */
class PowerCutTest {
  private static final int EPOCHS = 5;
  private static final int RANDOM_IMAGES = 32;
  /** Enumerate every image when at most this many lines are pending (2^8 images). */
  private static final int EXHAUSTIVE_UP_TO = 8;

  /** Ordering points of creation, and of the whole workload after it. */
  private static long[] measure() throws PoolException {
    SimMedium sim = SimMedium.create(0);
    Pool pool = Workload.freshPool(sim);
    long start = sim.orderingPoints();
    Workload.run(pool, sim, EPOCHS);
    return new long[] {start, sim.orderingPoints()};
  }

  private static List<byte[]> images(SimMedium sim) {
    List<byte[]> out = new ArrayList<>();
    out.add(sim.crash(CrashMode.DRAINED_ONLY));
    out.add(sim.crash(CrashMode.ALL_FLUSHED));
    for (long seed = 0; seed < RANDOM_IMAGES; seed++) {
      out.add(sim.crash(CrashMode.random(seed, true, true)));
    }
    int pending = sim.pendingLines();
    if (pending <= EXHAUSTIVE_UP_TO) {
      for (long i = 0; i < 1L << pending; i++) {
        out.add(sim.crash(CrashMode.exhaustive(i)));
      }
    }
    return out;
  }

  @Test
  void everyImageOfEveryCutOpensToTheOldOrTheNewCommit() throws Exception {
    long[] points = measure();
    assertTrue(points[1] - points[0] >= EPOCHS * 5, "5 ordering points per commit at least");
    int opened = 0;
    boolean sawNew = false;
    for (long p = points[0]; p < points[1]; p++) {
      SimMedium sim = SimMedium.create(0);
      Pool pool = Workload.freshPool(sim);
      sim.cutPowerAt(p);
      Workload w = Workload.run(pool, sim, EPOCHS); // runs on past the cut
      assertEquals(p, sim.powerCutPoint().orElseThrow());
      long[] allowed = w.allowed(p);
      List<byte[]> images = images(sim);
      for (int i = 0; i < images.size(); i++) {
        String what = "cut at point " + p + ", image " + i;
        Pool recovered;
        try {
          recovered = Pool.open(SimMedium.fromImage(images.get(i)));
        } catch (PoolException e) {
          throw new AssertionError(what + ": every crash image must open: " + e.getMessage(), e);
        }
        long e = w.verify(recovered, what);
        assertTrue(e >= allowed[0] && e <= allowed[1],
            what + ": epoch " + e + ", allowed " + allowed[0] + ".." + allowed[1]);
        sawNew |= allowed[0] != allowed[1] && e == allowed[1];
        opened++;
      }
      // The recovered pool is a working pool: it commits on.
      Pool recovered = Pool.open(SimMedium.fromImage(images.get(0)));
      long e = recovered.epoch();
      recovered.addSection("after-" + p, 4096, 0);
      recovered.commit(new long[] {e + 1});
      SimMedium again = SimMedium.fromImage(((SimMedium) recovered.medium()).persisted());
      assertEquals(e + 1, Pool.open(again).epoch(), "cut at point " + p + ": commit after");
    }
    assertTrue(opened > 1000, "images opened: " + opened);
    assertTrue(sawNew, "some image of a cut inside a commit shows the new commit");
  }

  /** How a half-made pool on a bare medium may be refused. */
  private static final Set<PoolException.Reason> REFUSALS = EnumSet.of(
      PoolException.Reason.NOT_A_POOL, PoolException.Reason.UNSUPPORTED_VERSION,
      PoolException.Reason.TRUNCATED, PoolException.Reason.HEADER_CHECKSUM,
      PoolException.Reason.HEADER_INVALID, PoolException.Reason.COMMIT_DAMAGED);

  @Test
  void aCutDuringCreationOnABareMediumNeverOpensWrong() throws Exception {
    // Every cut while formatting leaves a refused medium or the complete epoch 0. (Pool files
    // are safer still: they appear under their name only complete.)
    SimMedium probe = SimMedium.create(0);
    Workload.freshPool(probe);
    long points = probe.orderingPoints();
    assertEquals(2, points, "creation persists the metadata once");
    for (long p = 0; p < points; p++) {
      SimMedium sim = SimMedium.create(0);
      sim.cutPowerAt(p);
      Workload.freshPool(sim);
      for (byte[] img : images(sim)) {
        try (Pool pool = Pool.open(SimMedium.fromImage(img))) {
          assertEquals(0, pool.epoch());
          assertEquals("kioku.test", pool.kind());
          assertEquals(List.of(), pool.sections());
        } catch (PoolException e) {
          assertTrue(REFUSALS.contains(e.reason()), e.getMessage());
        }
      }
    }
  }

  @Test
  void aChildJvmHaltedAtTheCutLeavesAnImageThatOpens(@TempDir Path dir) throws Exception {
    SimMedium sim = SimMedium.create(0);
    Pool pool = Workload.freshPool(sim);
    Workload w = Workload.run(pool, sim, 2);
    long[] last = w.commitSpans.get(1);
    // Inside the last commit: at the drain of table and slot, at the index flush, at the final
    // drain (only there can the new index be among the flushed lines).
    for (long p : new long[] {last[0] + 2, last[0] + 3, last[1] - 1}) {
      Path image = dir.resolve("cut-" + p + ".img");
      Process child = TestSupport.childJvm(SimCutChild.class, image.toString(),
          Long.toString(p), "2").start();
      String out = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(child.waitFor(60, TimeUnit.SECONDS), "child hung");
      assertEquals(3, child.exitValue(), "the child halts at the cut: " + out);
      assertTrue(Files.size(image) > 0);
      try (Pool recovered = Pool.open(SimMedium.load(image))) {
        long e = w.verify(recovered, "child cut at " + p);
        long[] allowed = w.allowed(p);
        assertTrue(e >= allowed[0] && e <= allowed[1], "epoch " + e + " at point " + p);
        // ALL_FLUSHED from the final drain on includes the new index.
        if (p == last[1] - 1) {
          assertEquals(2, e);
        }
      }
    }
  }
}
