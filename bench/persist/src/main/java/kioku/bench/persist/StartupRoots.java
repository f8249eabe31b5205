package kioku.bench.persist;

import java.util.Map;
import kioku.persist.DurableRoot;

/** StartupMain's root; touched only after the pool is open. */
final class StartupRoots {
  private StartupRoots() {}

  @DurableRoot static Map<String, Integer> map;
}
