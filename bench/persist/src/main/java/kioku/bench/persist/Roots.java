package kioku.bench.persist;

import java.util.HashMap;
import kioku.persist.DurableRoot;

/**
 * The benchmarks' durable roots. Touch this class only after {@link Pools#open}: a class whose
 * static initializer ran before the pool was open has its roots ignored (see docs/persist.md).
 */
final class Roots {
  private Roots() {}

  /** Overhead, "persistence active": a small graph that keeps the barrier on. */
  @DurableRoot static Object marker;

  /** Reads. */
  @DurableRoot static int[] ints;

  @DurableRoot static Node list;

  @DurableRoot static HashMap<Integer, Integer> map;

  /** Writes. */
  @DurableRoot static Cell cell;

  @DurableRoot static int[] writeInts;

  @DurableRoot static Object[] writeRefs;

  @DurableRoot static HashMap<Integer, Integer> writeMap;

  @DurableRoot static Object[] keep;

  /** make_persistent: each invocation assigns a fresh graph here. */
  @DurableRoot static Object graph;

  /** make_persistent with two threads: the second thread's root. */
  @DurableRoot static Object graph2;
}
