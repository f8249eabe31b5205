package kioku.persist.heap;

import kioku.persist.pool.Medium;

/**
 * The two check words of a replica, which detect damage and correct one wrong word.
 *
 * <p>A replica is a sequence of 8-byte words; word p (p = offset / 8) is the header at p = 0,
 * the check words at p = 1 and 2, and the body from p = 3. Over every word but the checks:
 * {@code S1 = XOR w_p} and {@code S2 = SUM h(p) * w_p mod P}, P = 2^64 - 59 (a prime), with
 * h(p) a pseudo-random weight in [1, 2^63) ({@link #weight}). A store changes one word and
 * both checks incrementally ({@link #s1Delta}, {@link #s2Delta}, {@link #s2Add}), so the
 * checks never need the whole replica again.
 *
 * <p>Why a prime and random weights: in a sum modulo 2^64 a change of the top bit is 2^63 times
 * any weight, so two flipped top bits cancelled (and a single one could not be located); and
 * weights in a simple progression (2p + 1, p + 1) make structured pairs cancel (bit b of word r
 * cleared, bit b - 1 of word 2r + 1 set). Modulo P every weight is invertible, so one wrong
 * word always shows in both checks and S2 names its position; two wrong words the XOR does not
 * see (the same bits changed in both) always show in S2; any other damage escapes both checks
 * with a chance near 2^-64.
 *
 * <p>A store outside a failure-atomic section writes its word, then S2, then S1, with the
 * medium drained between them ({@code PersistentHeap.writeChecked}), so a crash leaves one of:
 * nothing new; the word new and both checks old (one wrong word: S1 gives the bits that
 * differ, S2 which word); the word and S2 new and S1 old (S1 stale); all new. {@link #verify}
 * repairs exactly those and refuses everything else: in particular S2 alone wrong, which the
 * store order never leaves but two wrong words the XOR does not see do (so a flipped bit in S2
 * itself is refused too: it cannot be told from them). Either outcome of a torn store is a
 * state the program could have seen (the store had not returned); a flipped bit in a word or
 * in S1 is put back. Replicas changed by a section that a crash interrupted get their checks
 * recomputed after the rollback instead ({@link #recompute}).
 */
final class ReplicaCheck {
  private ReplicaCheck() {}

  static final int S1 = 8;
  static final int S2 = 16;

  /** The modulus of S2: the largest prime below 2^64 (unsigned). */
  static final long P = 0xFFFFFFFFFFFFFFC5L; // 2^64 - 59

  /** 2^64 mod P. */
  private static final long TWO64 = 59;

  private static final int TABLE = 4096;
  private static final long[] WEIGHTS = new long[TABLE];

  static {
    for (int p = 0; p < TABLE; p++) WEIGHTS[p] = mixedWeight(p);
  }

  /** The weight of word p in S2: in [1, 2^63), so never 0 modulo P. */
  static long weight(long p) {
    return p < TABLE ? WEIGHTS[(int) p] : mixedWeight(p);
  }

  /** SplitMix64's finalizer of p, halved and made odd. */
  private static long mixedWeight(long p) {
    long z = p + 0x9E3779B97F4A7C15L;
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    z ^= z >>> 31;
    return (z >>> 1) | 1;
  }

  /** x mod P for x read as unsigned. */
  static long reduce(long x) {
    return Long.compareUnsigned(x, P) >= 0 ? x - P : x;
  }

  /** (a + b) mod P for a and b in [0, P). */
  static long add(long a, long b) {
    long s = a + b;
    if (Long.compareUnsigned(s, a) < 0) s += TWO64; // wrapped: 2^64 = 59 mod P (no wrap again)
    return reduce(s);
  }

  /** (a - b) mod P for a and b in [0, P). */
  static long sub(long a, long b) {
    return b == 0 ? a : add(a, P - b);
  }

  private static long unsignedMultiplyHigh(long a, long b) {
    return Math.multiplyHigh(a, b) + ((a >> 63) & b) + ((b >> 63) & a);
  }

  /** (a * b) mod P for a and b in [0, 2^64) read as unsigned. */
  static long mul(long a, long b) {
    long hi = unsignedMultiplyHigh(a, b);
    long lo = a * b;
    // hi * 2^64 + lo = hi * 59 + lo (mod P); hi * 59 < 2^70: fold once more.
    long hi2 = unsignedMultiplyHigh(hi, TWO64);
    long lo2 = hi * TWO64;
    return add(add(reduce(lo), reduce(lo2)), hi2 * TWO64);
  }

  static long s1Delta(long oldWord, long newWord) {
    return oldWord ^ newWord;
  }

  /** What word p's change from {@code oldWord} to {@code newWord} adds to S2 (mod P). */
  static long s2Delta(long p, long oldWord, long newWord) {
    return mulWeight(weight(p), sub(reduce(newWord), reduce(oldWord)));
  }

  /**
   * {@link #mul} of a weight (in [1, 2^63), from {@link #weight}) and a residue: the same value
   * with less work, for the store path. The product is below 2^127, so its high word is below
   * 2^63 and needs no unsigned correction for the weight, and that high word times 59 has a high
   * word below 59 computed with a signed multiply.
   */
  static long mulWeight(long weight, long d) {
    long hi = Math.multiplyHigh(weight, d) + ((d >> 63) & weight);
    long lo = weight * d;
    // hi * 2^64 + lo = hi * 59 + lo (mod P); hi * 59 = hh * 2^64 + hl with hh < 59.
    long hl = hi * TWO64;
    long hh = Math.multiplyHigh(hi, TWO64);
    return add(add(reduce(lo), reduce(hl)), hh * TWO64);
  }

  /** S2 after adding {@code delta} from {@link #s2Delta}. */
  static long s2Add(long s2, long delta) {
    return add(reduce(s2), delta);
  }

  /**
   * A sum of products {@code weight * word} kept as a 192-bit integer and reduced modulo P
   * only at the end: the check of a whole replica costs one multiplication per word.
   */
  static final class Sum {
    private long lo;
    private long mid;
    private long top;

    /** Adds {@code weight * word}, the weight from {@link #weight} (below 2^63). */
    void add(long weight, long word) {
      long pl = weight * word;
      long ph = Math.multiplyHigh(weight, word) + ((word >> 63) & weight); // weight >= 0
      long l = lo + pl;
      if (Long.compareUnsigned(l, pl) < 0) ph++; // ph < 2^64 - 1: no overflow
      lo = l;
      long m = mid + ph;
      if (Long.compareUnsigned(m, ph) < 0) top++;
      mid = m;
    }

    /**
     * The sum modulo P. Called once per replica at open (18 M times for 1 GB of small
     * objects), so it multiplies by the small constants directly instead of through {@link
     * #mul}: mid * 59 = h * 2^64 + l with h &lt; 59, and top counts the carries out of mid,
     * at most one per {@link #add}, so top * 59^2 stays far below P.
     */
    long value() {
      // top * 2^128 + mid * 2^64 + lo = top * 59^2 + mid * 59 + lo
      //                                = top * 59^2 + h * 59 + l + lo (mod P)
      long h = Math.multiplyHigh(mid, TWO64) + ((mid >> 63) & TWO64); // unsigned high word
      long l = mid * TWO64;
      long small = h * TWO64 + top * (TWO64 * TWO64); // < 2^63 for any replica (< 2^50 words)
      return ReplicaCheck.add(ReplicaCheck.add(reduce(lo), reduce(l)), small);
    }
  }

  /** S1 and S2 of the replica at {@code addr} of {@code bytes} bytes, read from the medium. */
  static long[] compute(HeapSpace space, long addr, long bytes) {
    Medium m = space.medium;
    long off = space.off(addr);
    long s1 = 0;
    Sum s2 = new Sum();
    long words = bytes / 8;
    for (long p = 0; p < words; p++) {
      if (p == 1 || p == 2) continue;
      long w = m.getLong(off + 8 * p);
      s1 ^= w;
      s2.add(weight(p), w);
    }
    return new long[] {s1, s2.value()};
  }

  /**
   * Whether the check words of a replica already read into {@code w[0..words)} hold: the
   * fast path of {@link #verify}, which a replica that fails it must still go through.
   */
  static boolean holds(long[] w, int words) {
    long s1 = w[0];
    Sum s2 = new Sum();
    s2.add(weight(0), w[0]);
    for (int p = 3; p < words; p++) {
      long x = w[p];
      s1 ^= x;
      s2.add(weight(p), x);
    }
    return s1 == w[1] && s2.value() == w[2];
  }

  /** Writes freshly computed checks (not flushed). */
  static void recompute(HeapSpace space, long addr, long bytes) {
    long[] s = compute(space, addr, bytes);
    space.putLong(addr + S1, s[0]);
    space.putLong(addr + S2, s[1]);
  }

  /** What {@link #verify} found. */
  enum Outcome {
    INTACT,
    /** One word or S1 was wrong and has been rewritten (flushed, not drained). */
    REPAIRED,
    DAMAGED
  }

  /**
   * Checks the replica and repairs what a torn store or one flipped bit leaves — one wrong
   * body or header word, or a wrong S1 — in place, and reports anything else as damage. The
   * caller knows the size from the header; if the repaired word is the header itself, the
   * caller must re-read it (a repaired header with another count means the size was wrong:
   * damage).
   */
  static Outcome verify(HeapSpace space, long addr, long bytes) {
    long[] s = compute(space, addr, bytes);
    long stored1 = space.getLong(addr + S1);
    long stored2 = space.getLong(addr + S2);
    boolean ok1 = s[0] == stored1;
    boolean ok2 = s[1] == stored2;
    if (ok1 && ok2) return Outcome.INTACT;
    if (Long.compareUnsigned(stored2, P) >= 0) return Outcome.DAMAGED; // never a residue
    if (ok2) {
      // S1 alone differs: a store's S1 that a crash lost (the word and S2 were written before
      // it), or S1 itself damaged. Damage to words instead would have to cancel in S2.
      space.putLong(addr + S1, s[0]);
      space.flush(addr + S1, 8);
      return Outcome.REPAIRED;
    }
    // S2 alone differs: no crash leaves that (a store writes S2 before S1), but two wrong words
    // that change the same bits do; and S2 damaged itself cannot be told from them.
    if (ok1) return Outcome.DAMAGED;
    // One data word w_p should be v = w_p ^ x, where x is what S1 says differs; S2 then says
    // h(p) * (v - w_p) = stored2 - s2 (mod P).
    long x = stored1 ^ s[0];
    long d2 = sub(stored2, s[1]);
    Medium m = space.medium;
    long off = space.off(addr);
    long words = bytes / 8;
    long found = -1;
    for (long p = 0; p < words; p++) {
      if (p == 1 || p == 2) continue;
      long w = m.getLong(off + 8 * p);
      if (s2Delta(p, w, w ^ x) == d2) {
        if (found >= 0) return Outcome.DAMAGED; // two explanations: do not guess
        found = p;
      }
    }
    if (found < 0) return Outcome.DAMAGED;
    long at = addr + 8 * found;
    space.putLong(at, space.getLong(at) ^ x);
    space.flush(at, 8);
    return Outcome.REPAIRED;
  }
}
