package kioku.stress;

/** A persistent object whose fields and slots the actors assign graphs into. */
public final class Holder {
  Object left;
  Object right;
  final Object[] slots = new Object[4];
  /** The registry id, to release it. */
  long id;

  /** A new holder, made persistent through the registry. */
  public static Holder persistent() {
    Holder h = new Holder();
    h.id = Durable.register(h);
    return h;
  }

  /** Adds this holder and its slots array to {@code names}. */
  public Check.Names named(Check.Names names) {
    return names.add("holder", this).add("holder.slots", slots);
  }

  public void release() {
    Durable.release(id);
  }
}
