package kioku.bench.persist;

import java.util.HashMap;

/**
 * The overhead benchmarks' third configuration, "persistence active" (system property
 * {@code kioku.bench.mode=active}, with the agent): a pool is open on /dev/shm and a small graph
 * (a HashMap and two objects) is persistent, so every write anywhere in the JVM pays the
 * barrier's fence and replica-word check (application objects: a field read; JDK collections
 * and arrays: a side-table lookup), though the workload's own objects stay non-persistent.
 */
final class Activation {
  private Activation() {}

  static boolean activeRequested() {
    return "active".equals(System.getProperty("kioku.bench.mode"));
  }

  static void fromProperty() {
    if (!activeRequested()) return;
    Pools.open("shm");
    HashMap<String, Object> m = new HashMap<>();
    Item a = new Item();
    a.id = 1;
    a.next = new Item();
    m.put("item", a);
    m.put("name", "persistence active");
    Roots.marker = m;
    if (Pools.persistentObjects() < 4) {
      throw new IllegalStateException("nothing became persistent: is the agent attached?");
    }
    Pools.printStats("active");
  }
}
