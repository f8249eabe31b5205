package kioku.persist.heap;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import kioku.persist.pool.Medium;

/**
 * The durable roots: one fixed entry per {@code @DurableRoot} field ever seen, named
 * "binary.ClassName#field", holding the heap address of the root's replica and a check word
 * over the name and the value. A new entry is written whole and made durable before the entry
 * count (its commit, a self-checking word) counts it. The value and its check change together
 * inside a failure-atomic section (PersistentHeap.setRoot), so after recovery's rollback every
 * entry checks, and one that does not is damage. Thread-safe: threads making different roots
 * persistent at once look up and add entries under the table's monitor.
 */
final class RootTable {
  private final Medium medium;
  private final long metaOff;
  private final Map<String, Integer> index = new HashMap<>();

  RootTable(Medium medium, long metaOff) {
    this.medium = medium;
    this.metaOff = metaOff;
  }

  private static HeapException damaged(String what) {
    return new HeapException(
        HeapException.Reason.DAMAGED,
        "persistent heap damaged: " + what + "; restore the pool from a backup");
  }

  synchronized void load() throws HeapException {
    long n = HeapFormat.count(medium.getLong(metaOff + HeapFormat.M_ROOT_COUNT));
    if (n < 0 || n > HeapFormat.MAX_ROOTS) throw damaged("the root count does not check");
    for (int i = 0; i < n; i++) {
      long e = entry(i);
      int len = medium.getShort(e + HeapFormat.ROOT_NAME_LEN) & 0xffff;
      if (len == 0 || len > HeapFormat.ROOT_NAME_MAX) {
        throw damaged("root " + i + " has a name of " + len + " bytes");
      }
      byte[] name = new byte[len];
      medium.get(e + HeapFormat.ROOT_NAME, name, 0, len);
      long value = medium.getLong(e + HeapFormat.ROOT_VALUE);
      if (medium.getLong(e + HeapFormat.ROOT_CHECK) != check(name, value)) {
        throw damaged("root " + i + " (" + new String(name, StandardCharsets.UTF_8) + ") does not check");
      }
      index.put(new String(name, StandardCharsets.UTF_8), i);
    }
  }

  /** The check word of an entry: its name and value mixed; never equal for a flipped bit. */
  static long check(byte[] name, long value) {
    long h = 0x243F6A8885A308D3L;
    for (byte b : name) h = (h ^ (b & 0xff)) * 0x100000001B3L;
    h ^= value * 0x9E3779B97F4A7C15L;
    h ^= h >>> 31;
    h *= 0xBF58476D1CE4E5B9L;
    return h ^ (h >>> 29);
  }

  long check(String name, long value) {
    return check(name.getBytes(StandardCharsets.UTF_8), value);
  }

  long entry(int i) {
    return metaOff + HeapFormat.ROOTS_OFF + (long) i * HeapFormat.ROOT_ENTRY;
  }

  /** The replica address a root holds (0: null or never set). */
  synchronized long get(String name) {
    Integer i = index.get(name);
    return i == null ? 0 : medium.getLong(entry(i) + HeapFormat.ROOT_VALUE);
  }

  /** Every root and its value, in entry order. */
  synchronized Map<String, Long> all() {
    Map<String, Long> out = new LinkedHashMap<>();
    index.entrySet().stream()
        .sorted(Map.Entry.comparingByValue())
        .forEach(e -> out.put(e.getKey(), medium.getLong(entry(e.getValue()))));
    return out;
  }

  /** The medium offset of a root's entry, creating it durably (value null) if needed. */
  synchronized long slot(String name) throws HeapException {
    Integer i = index.get(name);
    if (i == null) {
      byte[] bytes = name.getBytes(StandardCharsets.UTF_8);
      if (bytes.length > HeapFormat.ROOT_NAME_MAX) {
        throw new HeapException(
            HeapException.Reason.FULL,
            "durable root name too long (" + bytes.length + " bytes, at most "
                + HeapFormat.ROOT_NAME_MAX + "): " + name);
      }
      i = index.size();
      if (i >= HeapFormat.MAX_ROOTS) {
        throw new HeapException(
            HeapException.Reason.FULL,
            "too many durable roots (" + HeapFormat.MAX_ROOTS + "): " + name);
      }
      long e = entry(i);
      medium.putLong(e + HeapFormat.ROOT_VALUE, 0);
      medium.putLong(e + HeapFormat.ROOT_CHECK, check(bytes, 0));
      medium.putShort(e + HeapFormat.ROOT_NAME_LEN, (short) bytes.length);
      medium.put(e + HeapFormat.ROOT_NAME, bytes, 0, bytes.length);
      medium.flush(e, HeapFormat.ROOT_ENTRY);
      medium.drain();
      medium.putLong(metaOff + HeapFormat.M_ROOT_COUNT, HeapFormat.countWord(i + 1));
      medium.persist(metaOff + HeapFormat.M_ROOT_COUNT, 8);
      index.put(name, i);
    }
    return entry(i);
  }
}
