package kioku.bench.persist;

import kioku.persist.DurableRoot;

/**
 * The recovery benchmark's root. Its static initializer ends with the agent's
 * {@code rootsDeclared}: in a JVM whose pool holds a heap, initializing this class rebuilds the
 * whole graph and assigns it here.
 */
final class RecoveryRoots {
  private RecoveryRoots() {}

  @DurableRoot static Object[] chunks;
}
