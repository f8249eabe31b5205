package kioku.persist.heap;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.math.BigInteger;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * The store path's multiplication modulo P ({@link ReplicaCheck#mulWeight}) must give exactly
 * what the general one ({@link ReplicaCheck#mul}) and exact arithmetic give: a different
 * residue would make every replica a store touched look damaged at the next open.
 */
class ReplicaCheckArithmeticTest {
  private static final BigInteger P = new BigInteger(Long.toUnsignedString(ReplicaCheck.P));

  private static long exact(long a, long b) {
    BigInteger x = new BigInteger(Long.toUnsignedString(a));
    BigInteger y = new BigInteger(Long.toUnsignedString(b));
    return x.multiply(y).mod(P).longValue();
  }

  @Test
  void mulWeightIsMulForEveryWeightAndResidue() {
    long[] edges = {0, 1, 2, 58, 59, 60, Long.MAX_VALUE, Long.MIN_VALUE, ReplicaCheck.P - 1,
        ReplicaCheck.P - 2, -60, 0xFFFF_FFFFL, 1L << 32, (1L << 62) + 1};
    SplittableRandom r = new SplittableRandom(13);
    for (int i = 0; i < 200_000; i++) {
      long w = i < 4096 ? ReplicaCheck.weight(i) : (r.nextLong() >>> 1) | 1;
      long d = i % 3 == 0 ? edges[i % edges.length] : ReplicaCheck.reduce(r.nextLong());
      long want = exact(w, d);
      assertEquals(want, ReplicaCheck.mul(w, d), "mul " + w + " " + d);
      assertEquals(want, ReplicaCheck.mulWeight(w, d), "mulWeight " + w + " " + d);
    }
    long maxWeight = Long.MAX_VALUE; // the largest a weight can be
    for (long d : edges) {
      long dd = ReplicaCheck.reduce(d);
      assertEquals(exact(maxWeight, dd), ReplicaCheck.mulWeight(maxWeight, dd), "edge " + d);
    }
  }
}
