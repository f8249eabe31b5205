package kioku.persist.heap;

import kioku.persist.pool.Medium;

/**
 * The two check words of a replica, which detect damage and correct one wrong word.
 *
 * <p>A replica is a sequence of 8-byte words; word p (p = offset / 8) is the header at p = 0,
 * the check words at p = 1 and 2, and the body from p = 3. Over every word but the checks:
 * {@code S1 = XOR w_p} and {@code S2 = SUM (2p + 1) * w_p} (mod 2^64). A store changes one
 * word and both checks incrementally ({@link #s1Delta}, {@link #s2Delta}), so the checks never
 * need the whole replica again.
 *
 * <p>A store outside a failure-atomic section writes its word and the two checks and then
 * drains, so a crash can leave any of the three old or new: one wrong unit. So can one flipped
 * bit. {@link #verify} finds and fixes one wrong unit — a body or header word (S1 gives the bits
 * that differ, S2 which word: {@code (2p + 1)} is odd, hence invertible, so at most one p fits)
 * or a check word — and reports anything more as damage. Either outcome of a torn store is a
 * state the program could have seen (the store had not returned); a flipped bit is put back.
 * Replicas changed by a section that a crash interrupted get their checks recomputed after
 * the rollback instead ({@link #recompute}).
 */
final class ReplicaCheck {
  private ReplicaCheck() {}

  static final int S1 = 8;
  static final int S2 = 16;

  /** The weight of word p in S2. */
  static long weight(long p) {
    return 2 * p + 1;
  }

  static long s1Delta(long oldWord, long newWord) {
    return oldWord ^ newWord;
  }

  static long s2Delta(long p, long oldWord, long newWord) {
    return weight(p) * (newWord - oldWord);
  }

  /** S1 and S2 of the replica at {@code addr} of {@code bytes} bytes, read from the medium. */
  static long[] compute(HeapSpace space, long addr, long bytes) {
    Medium m = space.medium;
    long off = space.off(addr);
    long s1 = 0;
    long s2 = 0;
    long words = bytes / 8;
    for (long p = 0; p < words; p++) {
      if (p == 1 || p == 2) continue;
      long w = m.getLong(off + 8 * p);
      s1 ^= w;
      s2 += weight(p) * w;
    }
    return new long[] {s1, s2};
  }

  /**
   * Whether the check words of a replica already read into {@code w[0..words)} hold: the
   * fast path of {@link #verify}, which a replica that fails it must still go through.
   */
  static boolean holds(long[] w, int words) {
    long s1 = w[0];
    long s2 = w[0]; // weight(0) = 1
    for (int p = 3; p < words; p++) {
      long x = w[p];
      s1 ^= x;
      s2 += weight(p) * x;
    }
    return s1 == w[1] && s2 == w[2];
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
    /** One word or check was wrong and has been rewritten (flushed, not drained). */
    REPAIRED,
    DAMAGED
  }

  /**
   * Checks the replica and repairs one wrong word or check word in place. The caller knows
   * the size from the header; if the repaired word is the header itself, the caller must
   * re-read it (a repaired header with another count means the size was wrong: damage).
   */
  static Outcome verify(HeapSpace space, long addr, long bytes) {
    long[] s = compute(space, addr, bytes);
    long stored1 = space.getLong(addr + S1);
    long stored2 = space.getLong(addr + S2);
    boolean ok1 = s[0] == stored1;
    boolean ok2 = s[1] == stored2;
    if (ok1 && ok2) return Outcome.INTACT;
    if (ok1) {
      space.putLong(addr + S2, s[1]);
      space.flush(addr + S2, 8);
      return Outcome.REPAIRED;
    }
    if (ok2) {
      space.putLong(addr + S1, s[0]);
      space.flush(addr + S1, 8);
      return Outcome.REPAIRED;
    }
    // One data word w_p should be v = w_p ^ x, where x is what S1 says differs; S2 then says
    // (2p + 1) * (v - w_p) = stored2 - s2.
    long x = stored1 ^ s[0];
    long d2 = stored2 - s[1];
    Medium m = space.medium;
    long off = space.off(addr);
    long words = bytes / 8;
    long found = -1;
    for (long p = 0; p < words; p++) {
      if (p == 1 || p == 2) continue;
      long w = m.getLong(off + 8 * p);
      if (weight(p) * ((w ^ x) - w) == d2) {
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
