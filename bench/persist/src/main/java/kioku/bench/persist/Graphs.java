package kioku.bench.persist;

/**
 * The fresh graphs of the make_persistent benchmark, by name: {@code items-N} is a linked list
 * of N {@link Item}s (N objects, 5 words each: header + 4 slots), {@code longs-N} one long[N]
 * (1 object, N + 1 words).
 */
final class Graphs {
  private Graphs() {}

  static Object build(String shape) {
    int n = size(shape);
    if (shape.startsWith("items-")) {
      Item head = null;
      for (int i = 0; i < n; i++) {
        Item it = new Item();
        it.id = i;
        it.count = i & 1023;
        it.price = i * 0.25;
        it.next = head;
        head = it;
      }
      return head;
    }
    if (shape.startsWith("longs-")) {
      long[] a = new long[n];
      for (int i = 0; i < n; i++) a[i] = i * 0x9E3779B97F4A7C15L;
      return a;
    }
    throw new IllegalArgumentException("unknown shape " + shape);
  }

  /** A deep copy in ordinary memory: the baseline of make_persistent. */
  static Object copy(Object g) {
    if (g instanceof long[] a) return a.clone();
    Item src = (Item) g;
    Item head = new Item();
    Item dst = head;
    while (true) {
      dst.id = src.id;
      dst.count = src.count;
      dst.price = src.price;
      src = src.next;
      if (src == null) break;
      dst.next = new Item();
      dst = dst.next;
    }
    return head;
  }

  static int size(String shape) {
    return Integer.parseInt(shape.substring(shape.indexOf('-') + 1));
  }

  static long objects(String shape) {
    return shape.startsWith("items-") ? size(shape) : 1;
  }

  static long words(String shape) {
    return shape.startsWith("items-") ? 5L * size(shape) : size(shape) + 1L;
  }
}
