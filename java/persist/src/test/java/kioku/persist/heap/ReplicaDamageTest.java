package kioku.persist.heap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.Arrays;
import java.util.Random;
import kioku.persist.pool.CrashMode;
import kioku.persist.pool.SimMedium;
import org.junit.jupiter.api.Test;

/**
 * Damage to more than one word of a replica is refused or repaired to exactly what was
 * written, never opened with other values: two flips of the same bit in two words (which
 * cancel in the XOR check word), flips of the top bit (which cancel in any sum modulo 2^64),
 * and random damage to several words, in a replica read whole and one larger than a read.
 */
class ReplicaDamageTest {
  /** A written heap whose root is {@code root}, as the image a clean stop leaves. */
  private record Written(Object root, byte[] image, int at, int words) {}

  private static Written write(Object root) throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    HeapHarness.setRoot(h, root);
    long addr = PersistentHeap.addressOf(h.word(root));
    long header = h.space().getLong(addr);
    long size = h.classes().get((int) header).replicaSize(header >>> 32);
    byte[] image = m.crash(CrashMode.DRAINED_ONLY);
    return new Written(root, image, (int) h.space().off(addr), (int) (size / 8));
  }

  private static long[] longs(int n) {
    long[] a = new long[n];
    for (int i = 0; i < n; i++) a[i] = (i + 1) * 0x9E3779B97F4A7C15L;
    return a;
  }

  private static void flip(byte[] image, int at, int word, int bit) {
    image[at + 8 * word + bit / 8] ^= (byte) (1 << (bit % 8));
  }

  /**
   * Opens the damaged image: true if refused with a message that says the heap is damaged and
   * what to do, false if it opened with exactly the written values; fails otherwise.
   */
  private static boolean refusedOrExact(Written w, byte[] damaged, String what) throws Exception {
    Object got;
    try {
      got = HeapHarness.recoveredRoot(HeapHarness.open(SimMedium.fromImage(damaged)));
    } catch (HeapException e) {
      String msg = e.getMessage();
      assertTrue(msg.contains("damaged") && msg.contains("restore the pool from a backup"),
          what + ": refused without saying it is damaged and what to do: " + msg);
      return true;
    }
    if (w.root() instanceof long[] want) {
      if (!Arrays.equals(want, (long[]) got)) {
        long[] g = (long[]) got;
        int i = 0;
        while (i < want.length && want[i] == g[i]) i++;
        fail(what + ": opened with other values (element " + i + ": " + Long.toHexString(g[i])
            + " instead of " + Long.toHexString(want[i]) + ")");
      }
    } else {
      assertEquals(BitFlipTest.describe(w.root()), BitFlipTest.describe(got), what + ": opened with other values");
    }
    return false;
  }

  @Test
  void theSameBitFlippedInTwoWordsIsRefused() throws Exception {
    for (int n : new int[] {5, 5000}) {
      Written w = write(longs(n));
      int last = w.words() - 1;
      int[][] pairs = {{3, 4}, {3, last}, {4, last - 1}, {0, 3}, {1, 3}, {2, 3}, {1, 2}, {5, 7},
          {3, Math.min(4098, last)}, {Math.min(4095, last - 1), Math.min(4096, last)}};
      for (int[] pair : pairs) {
        for (int bit : new int[] {0, 5, 31, 32, 62, 63}) {
          byte[] damaged = w.image().clone();
          flip(damaged, w.at(), pair[0], bit);
          flip(damaged, w.at(), pair[1], bit);
          String what = "long[" + n + "], bit " + bit + " of words " + pair[0] + " and " + pair[1];
          boolean refused = refusedOrExact(w, damaged, what);
          // Two wrong body words cannot be told from other two: only a refusal is sound.
          if (pair[0] >= 3 && pair[1] >= 3) assertTrue(refused, what + ": not refused");
        }
      }
    }
  }

  @Test
  void randomDamageToSeveralWordsIsRefusedOrRepairedExactly() throws Exception {
    Random rnd = new Random(0x5eed);
    int refused = 0;
    for (Object root : new Object[] {longs(5), longs(5000), BitFlipTest.graph()}) {
      Written w = write(root);
      int trials = w.words() > 1000 ? 40 : 150;
      for (int t = 0; t < trials; t++) {
        byte[] damaged = w.image().clone();
        int k = 2 + rnd.nextInt(3);
        StringBuilder what = new StringBuilder(root.getClass().getSimpleName() + " words");
        int[] picked = rnd.ints(0, w.words()).distinct().limit(k).toArray();
        int sameBit = rnd.nextInt(64);
        for (int word : picked) {
          switch (rnd.nextInt(3)) {
            case 0 -> flip(damaged, w.at(), word, sameBit);
            case 1 -> flip(damaged, w.at(), word, rnd.nextInt(64));
            default -> {
              for (int b = 0; b < 8; b++) damaged[w.at() + 8 * word + b] ^= (byte) (1 + rnd.nextInt(255));
            }
          }
          what.append(' ').append(word);
        }
        if (refusedOrExact(w, damaged, what.toString())) refused++;
      }
    }
    assertTrue(refused > 0);
  }

  @Test
  void oneWrongBodyWordIsStillRepaired() throws Exception {
    for (int n : new int[] {5, 5000}) {
      Written w = write(longs(n));
      for (int word : new int[] {3, 4, w.words() - 1}) {
        for (int bit : new int[] {0, 31, 63}) {
          byte[] damaged = w.image().clone();
          flip(damaged, w.at(), word, bit);
          PersistentHeap h = HeapHarness.open(SimMedium.fromImage(damaged));
          assertTrue(Arrays.equals((long[]) w.root(), (long[]) HeapHarness.recoveredRoot(h)),
              "long[" + n + "] word " + word + " bit " + bit);
          assertEquals(1, h.stats().repairedAtOpen(), "long[" + n + "] word " + word + " bit " + bit);
        }
      }
    }
  }

  /**
   * A store outside a section cut by a power failure at each of its ordering points, with
   * words torn and unflushed lines evicted at random: every image opens with the old value or
   * the new one, never refused (the store order leaves only what {@link ReplicaCheck#verify}
   * repairs) and never anything else.
   */
  @Test
  void aStoreCutAtAnyPointOpensOldOrNew() throws Exception {
    for (int n : new int[] {5, 5000}) {
      for (int index : new int[] {0, n - 1}) {
        long[] a = longs(n);
        long before = a[index];
        long after = ~before ^ 0x8000_0000_0000_0001L; // changes most bits, the top one too
        SimMedium probe = SimMedium.create(0);
        PersistentHeap hp = HeapHarness.create(probe);
        long[] ap = longs(n);
        HeapHarness.setRoot(hp, ap);
        long start = probe.orderingPoints();
        ap[index] = after;
        hp.storePrimitive(ap, index, after);
        long points = probe.orderingPoints() - start;
        assertTrue(points >= 3, "a store has " + points + " ordering points");
        for (long cutAt = start; cutAt <= start + points; cutAt++) {
          SimMedium m = SimMedium.create(0);
          PersistentHeap h = HeapHarness.create(m);
          HeapHarness.setRoot(h, a);
          m.cutPowerAt(cutAt);
          a[index] = after;
          h.storePrimitive(a, index, after);
          for (long seed = 0; seed < 24; seed++) {
            byte[] image = m.crash(CrashMode.random(seed, true, true));
            long[] got = (long[]) HeapHarness.recoveredRoot(HeapHarness.open(SimMedium.fromImage(image)));
            String what = "long[" + n + "][" + index + "] cut at " + (cutAt - start) + " seed " + seed;
            assertTrue(got[index] == before || got[index] == after, what + ": " + Long.toHexString(got[index]));
            a[index] = got[index];
            assertTrue(Arrays.equals(a, got), what + ": another element changed");
          }
          a[index] = before;
        }
      }
    }
  }

  /**
   * Two flips of bit k in words q and r change S2 by 2^k (±h(q) ± h(r)) mod P: zero only if
   * h(q) = ±h(r) mod P. No two weights of the table (replicas up to 4,096 words) are.
   */
  @Test
  void noTwoWeightsOfTheTableAreEqualOrOpposite() {
    long[] all = new long[2 * 4096];
    for (int p = 0; p < 4096; p++) {
      long h = ReplicaCheck.weight(p);
      assertTrue(h > 0, "weight " + p);
      all[2 * p] = h;
      all[2 * p + 1] = ReplicaCheck.P - h; // -h mod P
    }
    long[] sorted = all.clone();
    Arrays.sort(sorted); // any total order puts equal values next to each other
    for (int i = 1; i < sorted.length; i++) {
      assertTrue(sorted[i] != sorted[i - 1], "two weights equal or opposite: " + Long.toHexString(sorted[i]));
    }
    // And the arithmetic: h * (new - old) mod P of one word, against BigInteger.
    java.math.BigInteger bigP = new java.math.BigInteger(Long.toUnsignedString(ReplicaCheck.P));
    Random rnd = new Random(7);
    for (int i = 0; i < 10_000; i++) {
      long p = rnd.nextInt(1 << 20);
      long a = rnd.nextLong();
      long b = i % 3 == 0 ? a ^ Long.MIN_VALUE : rnd.nextLong();
      java.math.BigInteger want = java.math.BigInteger.valueOf(ReplicaCheck.weight(p))
          .multiply(new java.math.BigInteger(Long.toUnsignedString(b)).subtract(new java.math.BigInteger(Long.toUnsignedString(a))))
          .mod(bigP);
      assertEquals(want.longValue(), ReplicaCheck.s2Delta(p, a, b), "p " + p);
      ReplicaCheck.Sum sum = new ReplicaCheck.Sum();
      sum.add(ReplicaCheck.weight(p), b);
      sum.add(ReplicaCheck.weight(p + 1), a);
      java.math.BigInteger sumWant = java.math.BigInteger.valueOf(ReplicaCheck.weight(p))
          .multiply(new java.math.BigInteger(Long.toUnsignedString(b)))
          .add(java.math.BigInteger.valueOf(ReplicaCheck.weight(p + 1)).multiply(new java.math.BigInteger(Long.toUnsignedString(a))))
          .mod(bigP);
      assertEquals(sumWant.longValue(), sum.value(), "sum at p " + p);
    }
    // A long sum, whose 192-bit accumulator carries into its top word.
    ReplicaCheck.Sum sum = new ReplicaCheck.Sum();
    java.math.BigInteger want = java.math.BigInteger.ZERO;
    for (int i = 0; i < 100_000; i++) {
      long w = rnd.nextLong() | Long.MIN_VALUE;
      sum.add(ReplicaCheck.weight(i), w);
      want = want.add(java.math.BigInteger.valueOf(ReplicaCheck.weight(i)).multiply(new java.math.BigInteger(Long.toUnsignedString(w))));
    }
    assertEquals(want.mod(bigP).longValue(), sum.value());
  }

  /**
   * The sum of a small replica, whose reduction multiplies by 59 and 59^2 directly: against
   * BigInteger for words at the edges (0, 1, P - 1, P, 2^63, 2^64 - 1) and random ones, 1 to 40
   * words, so that the accumulator's middle word runs to 2^64 - 1 and carries into its top.
   */
  @Test
  void theSumOfFewWordsReducesExactly() {
    java.math.BigInteger bigP = new java.math.BigInteger(Long.toUnsignedString(ReplicaCheck.P));
    long[] edges = {0, 1, ReplicaCheck.P - 1, ReplicaCheck.P, Long.MIN_VALUE, -1L, Long.MAX_VALUE};
    Random rnd = new Random(11);
    for (int round = 0; round < 20_000; round++) {
      int n = 1 + rnd.nextInt(40);
      ReplicaCheck.Sum sum = new ReplicaCheck.Sum();
      java.math.BigInteger want = java.math.BigInteger.ZERO;
      for (int p = 0; p < n; p++) {
        long w = rnd.nextInt(3) == 0 ? edges[rnd.nextInt(edges.length)] : rnd.nextLong();
        long h = ReplicaCheck.weight(round % 2 == 0 ? p : 4096 + rnd.nextInt(1 << 30));
        sum.add(h, w);
        want = want.add(java.math.BigInteger.valueOf(h).multiply(new java.math.BigInteger(Long.toUnsignedString(w))));
      }
      assertEquals(want.mod(bigP).longValue(), sum.value(), "round " + round);
    }
  }
}
