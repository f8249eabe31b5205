package kioku.persist.heap;

import kioku.persist.pool.Pool;
import kioku.persist.pool.SimMedium;
import kioku.persist.rt.FieldIds;

/** A heap on a simulated medium and the barrier calls instrumented code would make. */
final class HeapHarness {
  static final int ROOT = FieldIds.ROOTS.register("kioku/persist/heap/Holder", "root", "Ljava/lang/Object;", false);

  static int field(String name, String desc) {
    return FieldIds.WRITTEN.register("kioku/persist/heap/Node", name, desc, false);
  }

  static PersistentHeap.Options small() {
    return new PersistentHeap.Options(1L << 20, 2, 64L << 10);
  }

  static PersistentHeap create(SimMedium m) throws Exception {
    return create(m, small());
  }

  static PersistentHeap create(SimMedium m, PersistentHeap.Options o) throws Exception {
    PersistentHeap h = PersistentHeap.create(Pool.create(m, PersistentHeap.POOL_KIND), o);
    Holder.root = null; // as a fresh class would have it
    h.rootsDeclared(Holder.class);
    return h;
  }

  static PersistentHeap open(SimMedium m) throws Exception {
    return PersistentHeap.open(Pool.open(m));
  }

  /** Opens an existing heap as the program would, its root declared (and recovered). */
  static PersistentHeap reopen(SimMedium m, long isolationWaitMillis) throws Exception {
    PersistentHeap h = PersistentHeap.open(Pool.open(m), isolationWaitMillis, RootNames.NONE);
    h.rootsDeclared(Holder.class);
    return h;
  }

  /** What Holder.root = v does under the agent. */
  static void setRoot(PersistentHeap h, Object v) {
    Object old = Holder.root;
    Holder.root = v;
    h.putRoot(v, old, ROOT);
  }

  static Object recoveredRoot(PersistentHeap h) throws Exception {
    return h.recover(HeapHarness.class.getClassLoader()).get("kioku.persist.heap.Holder#root");
  }
}
