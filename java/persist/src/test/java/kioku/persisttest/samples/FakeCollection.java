package kioku.persisttest.samples;

import java.util.Objects;

/**
 * Shaped like a JDK collection, to test the failure-atomic sections the agent adds to
 * retransformed JDK classes (which cannot be defined in a test loader).
 */
public class FakeCollection {
  private Object[] elements = new Object[2];
  private int size;
  public int modCount;

  public boolean add(Object o) {
    if (size == elements.length) grow();
    elements[size++] = o;
    modCount++;
    return true;
  }

  private void grow() {
    Object[] bigger = new Object[elements.length * 2];
    System.arraycopy(elements, 0, bigger, 0, size);
    elements = bigger;
  }

  public Object get(int i) {
    Objects.checkIndex(i, size);
    return elements[i];
  }

  /** No write and no call: not wrapped. */
  public int size() {
    return size;
  }

  public void failAfterWrite() {
    modCount++;
    throw new IllegalStateException("boom");
  }

  /** Catches its own exception and returns normally. */
  public int catchInside() {
    try {
      get(size + 5);
      return 0;
    } catch (IndexOutOfBoundsException e) {
      modCount++;
      return -1;
    }
  }

  /** Returns from inside a loop, a long (two-slot) result. */
  public long find(Object o) {
    for (int i = 0; i < size; i++) {
      if (Objects.equals(o, elements[i])) return i;
    }
    return -1L;
  }

  public double average() {
    synchronized (this) {
      double s = 0;
      for (int i = 0; i < size; i++) s += ((Number) elements[i]).doubleValue();
      return size == 0 ? Double.NaN : s / size;
    }
  }

  public void clear() {
    for (int i = 0; i < size; i++) elements[i] = null;
    size = 0;
  }

  public static FakeCollection of(Object... xs) {
    FakeCollection c = new FakeCollection();
    for (Object x : xs) c.add(x);
    return c;
  }
}
