package kioku.persist.pool;

/**
 * Which image {@link SimMedium#crash} builds from the state at the power cut (docs/media.md,
 * "The simulator's ordering-point model").
 */
public sealed interface CrashMode {
  /** Every flushed-but-undrained line is lost: only drained data survives. */
  CrashMode DRAINED_ONLY = new DrainedOnly();

  /** Every flushed-but-undrained line reached the media. */
  CrashMode ALL_FLUSHED = new AllFlushed();

  /**
   * Each pending line kept or lost at random, reproducibly for {@code seed}. With
   * {@code tearWords} each aligned 8-byte word of a line is decided on its own (8-byte stores
   * are the failure-atomic unit). With {@code evictUnflushed}, a line whose content differs from
   * what was last flushed (stored and never flushed, or stored again after its flush) may also
   * have reached the media, as caches evict lines at any time.
   */
  static CrashMode random(long seed, boolean tearWords, boolean evictUnflushed) {
    return new Random(seed, tearWords, evictUnflushed);
  }

  /**
   * Image number {@code index} of the 2^P subsets of the P pending lines: bit {@code j} keeps
   * the {@code j}-th pending line in offset order. Needs P ≤ {@link SimMedium#EXHAUSTIVE_LIMIT}.
   */
  static CrashMode exhaustive(long index) {
    return new Exhaustive(index);
  }

  record DrainedOnly() implements CrashMode {}

  record AllFlushed() implements CrashMode {}

  record Exhaustive(long index) implements CrashMode {}

  record Random(long seed, boolean tearWords, boolean evictUnflushed) implements CrashMode {}
}
