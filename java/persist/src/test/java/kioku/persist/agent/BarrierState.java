package kioku.persist.agent;

import kioku.persist.rt.Barrier;
import kioku.persist.rt.Hooks;

/**
 * Barrier's global switches set for one test and put back after it, so that these tests
 * neither depend on nor disturb other tests running in the same JVM.
 */
final class BarrierState implements AutoCloseable {
  private final Hooks hooks = Barrier.hooks;
  private final boolean active = Barrier.active;
  private final boolean reportUnhashed = Barrier.reportUnhashed;

  private BarrierState() {}

  /**
   * Sets {@code hooks} (null: none) and {@code active}, and has every store reported (objects
   * without an identity hash too); {@link #close} restores them.
   */
  static BarrierState install(Hooks hooks, boolean active) {
    BarrierState saved = new BarrierState();
    Barrier.active = false;
    Barrier.reportUnhashed = true;
    Barrier.hooks = hooks;
    Barrier.active = active;
    return saved;
  }

  @Override
  public void close() {
    Barrier.active = false;
    Barrier.reportUnhashed = reportUnhashed;
    Barrier.hooks = hooks;
    Barrier.active = active;
  }
}
