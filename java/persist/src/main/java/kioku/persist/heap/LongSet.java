package kioku.persist.heap;

/**
 * A set of nonzero longs (heap addresses) that the runtime can use inside the write barrier:
 * it is kioku's own class, so its stores are not instrumented, and clearing it costs only
 * what was added.
 */
final class LongSet {
  private long[] keys = new long[64];
  private long[] added = new long[16];
  private int size;

  /** True if {@code key} was not in the set. */
  boolean add(long key) {
    if ((size + 1) * 2 > keys.length) grow();
    int mask = keys.length - 1;
    for (int i = slot(key, mask); ; i = (i + 1) & mask) {
      long k = keys[i];
      if (k == key) return false;
      if (k == 0) {
        keys[i] = key;
        if (size == added.length) added = java.util.Arrays.copyOf(added, size * 2);
        added[size++] = key;
        return true;
      }
    }
  }

  /** Removes {@code key} (rare: a log that could not take its entry); true if it was there. */
  boolean remove(long key) {
    int mask = keys.length - 1;
    int i = slot(key, mask);
    while (keys[i] != key) {
      if (keys[i] == 0) return false;
      i = (i + 1) & mask;
    }
    int n = size;
    long[] rest = java.util.Arrays.copyOf(added, n);
    clear();
    for (int j = 0; j < n; j++) if (rest[j] != key) add(rest[j]);
    return true;
  }

  /** The keys, in the order they were added. */
  long[] toArray() {
    return java.util.Arrays.copyOf(added, size);
  }

  void clear() {
    if (size * 8 < keys.length && keys.length > 1024) {
      keys = new long[64];
      added = new long[16];
    } else {
      int mask = keys.length - 1;
      for (int j = 0; j < size; j++) {
        for (int i = slot(added[j], mask); ; i = (i + 1) & mask) {
          if (keys[i] == added[j]) {
            keys[i] = 0;
            break;
          }
        }
      }
      // Every key ever added is removed, so the table ends empty whatever the probe chains.
    }
    size = 0;
  }

  int size() {
    return size;
  }

  private void grow() {
    long[] old = added;
    int n = size;
    keys = new long[keys.length * 2];
    int mask = keys.length - 1;
    for (int j = 0; j < n; j++) {
      int i = slot(old[j], mask);
      while (keys[i] != 0) i = (i + 1) & mask;
      keys[i] = old[j];
    }
  }

  private static int slot(long key, int mask) {
    return (int) ((key * 0x9E3779B97F4A7C15L) >>> 40) & mask;
  }
}
