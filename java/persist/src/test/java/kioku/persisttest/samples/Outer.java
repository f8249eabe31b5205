package kioku.persisttest.samples;

import java.util.function.IntSupplier;

/** Inner and local classes: javac writes this$0 and captured values before super(). */
public class Outer {
  public int base = 10;

  public class Inner {
    public int y;

    public Inner(int y) {
      this.y = y + base;
    }
  }

  public Inner inner(int y) {
    return new Inner(y);
  }

  public IntSupplier captured(int k) {
    int local = k * 2;
    return new IntSupplier() {
      int calls;

      @Override
      public int getAsInt() {
        calls++;
        return local + base + calls;
      }
    };
  }
}
