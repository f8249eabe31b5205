package kioku.persisttest.samples;

/** super.clone(), covariant clone, and clone() inherited from Object. */
public class Cloning implements Cloneable {
  public int v = 3;

  @Override
  public Cloning clone() {
    try {
      return (Cloning) super.clone();
    } catch (CloneNotSupportedException e) {
      throw new AssertionError(e);
    }
  }

  /** Does not override clone(): (Plain) clone() reaches Object.clone() virtually. */
  public static class Plain implements Cloneable {
    public int v = 4;

    public Plain copy() throws CloneNotSupportedException {
      return (Plain) clone();
    }
  }

  /** A clone() that returns the receiver: not a copy, so its word must stay. */
  public static class Shared extends Plain {
    @Override
    protected Object clone() {
      return this;
    }
  }
}
