package kioku.persist.rt;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Numbers fields at instrumentation time, so that instrumented code passes an int constant and
 * the runtime resolves it to a {@link java.lang.reflect.Field} only when it first needs it.
 * {@link #WRITTEN} numbers the instance fields that instrumented code writes; {@link #ROOTS}
 * the {@code @DurableRoot} static fields it assigns. The same (owner, name, descriptor) always
 * gets the same number in one JVM.
 */
public final class FieldIds {
  /** Instance fields written by putfield. */
  public static final FieldIds WRITTEN = new FieldIds();

  /** Static fields annotated {@code @DurableRoot}, assigned by putstatic. */
  public static final FieldIds ROOTS = new FieldIds();

  /**
   * A field as named in bytecode: internal owner name, field name, descriptor. Its equals and
   * hashCode are written out: a record's generated ones bootstrap method handles on first use,
   * which costs the agent's start-up about 50 ms.
   */
  public record FieldRef(String owner, String name, String desc, boolean isVolatile) {
    @Override
    public boolean equals(Object o) {
      return o instanceof FieldRef r
          && owner.equals(r.owner)
          && name.equals(r.name)
          && desc.equals(r.desc)
          && isVolatile == r.isVolatile;
    }

    @Override
    public int hashCode() {
      return ((owner.hashCode() * 31 + name.hashCode()) * 31 + desc.hashCode()) * 2
          + (isVolatile ? 1 : 0);
    }
  }

  private final List<FieldRef> byId = new ArrayList<>();
  private final Map<FieldRef, Integer> ids = new HashMap<>();

  private FieldIds() {}

  /** The id of a field, registering it on first sight. Ids start at 1. */
  public synchronized int register(String owner, String name, String desc, boolean isVolatile) {
    FieldRef ref = new FieldRef(owner, name, desc, isVolatile);
    Integer id = ids.get(ref);
    if (id == null) {
      byId.add(ref);
      id = byId.size();
      ids.put(ref, id);
    }
    return id;
  }

  public synchronized FieldRef get(int id) {
    return byId.get(id - 1);
  }

  public synchronized int count() {
    return byId.size();
  }
}
