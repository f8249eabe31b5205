package kioku.persisttest.samples;

import java.util.function.Consumer;

/** Constructors storing into this before and after this may have escaped (ThisEscape). */
public final class Fresh {
  private Fresh() {}

  /** Stores only: this never leaves the frame. */
  public static class Plain {
    public int a;
    public Object b;

    public Plain(int a, Object b) {
      this.a = a;
      this.b = b;
      this.a += a;
    }
  }

  /** Handed to a consumer between two stores: the second needs its barrier. */
  public static class Leaks {
    public int a;
    public Object b;

    public Leaks(int a, Consumer<Object> sink) {
      this.a = a;
      sink.accept(this);
      this.b = "after";
    }
  }

  /** A store in a loop: the loop's head is a jump target, where the analysis stops. */
  public static class Loop {
    public int a;

    public Loop(int n) {
      this.a = 1;
      for (int i = 0; i < n; i++) this.a += i;
    }
  }

  /** Stores this into itself: taken as an escape. */
  public static class SelfRef {
    public int a;
    public Object self;

    public SelfRef() {
      this.self = this;
      this.a = 2;
    }
  }

  /** A super() other than Object's may leak this. */
  public static class Sub extends Plain {
    public int c;

    public Sub() {
      super(1, null);
      this.c = 3;
    }
  }

  /** Writes another object too: that store keeps its barrier. */
  public static class ViaOther {
    public int a;
    public Object b;

    public ViaOther(Plain other) {
      this.a = other.a;
      other.b = "x";
      this.b = "y";
    }
  }
}
