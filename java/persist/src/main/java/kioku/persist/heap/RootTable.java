package kioku.persist.heap;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import kioku.persist.pool.Medium;

/**
 * The durable roots: one fixed entry per {@code @DurableRoot} field ever seen, named
 * "binary.ClassName#field", holding the heap address of the root's replica. Setting a root is
 * one failure-atomic 8-byte store; a new entry is written whole and made durable before the
 * entry count (its commit) counts it.
 */
final class RootTable {
  private final Medium medium;
  private final long metaOff;
  private final Map<String, Integer> index = new HashMap<>();

  RootTable(Medium medium, long metaOff) {
    this.medium = medium;
    this.metaOff = metaOff;
  }

  void load() throws HeapException {
    long n = medium.getLong(metaOff + HeapFormat.M_ROOT_COUNT);
    if (n < 0 || n > HeapFormat.MAX_ROOTS) {
      throw new HeapException(
          HeapException.Reason.DAMAGED,
          "persistent heap damaged: root count " + n + "; restore the pool from a backup");
    }
    for (int i = 0; i < n; i++) {
      long e = entry(i);
      int len = medium.getShort(e + HeapFormat.ROOT_NAME_LEN) & 0xffff;
      if (len == 0 || len > HeapFormat.ROOT_NAME_MAX) {
        throw new HeapException(
            HeapException.Reason.DAMAGED,
            "persistent heap damaged: root " + i + " has a name of " + len + " bytes");
      }
      byte[] name = new byte[len];
      medium.get(e + HeapFormat.ROOT_NAME, name, 0, len);
      index.put(new String(name, StandardCharsets.UTF_8), i);
    }
  }

  private long entry(int i) {
    return metaOff + HeapFormat.ROOTS_OFF + (long) i * HeapFormat.ROOT_ENTRY;
  }

  /** The replica address a root holds (0: null or never set). */
  long get(String name) {
    Integer i = index.get(name);
    return i == null ? 0 : medium.getLong(entry(i) + HeapFormat.ROOT_VALUE);
  }

  /** Every root and its value, in entry order. */
  Map<String, Long> all() {
    Map<String, Long> out = new LinkedHashMap<>();
    index.entrySet().stream()
        .sorted(Map.Entry.comparingByValue())
        .forEach(e -> out.put(e.getKey(), medium.getLong(entry(e.getValue()))));
    return out;
  }

  /** The medium offset of a root's value word, creating its entry durably if needed. */
  long slot(String name) throws HeapException {
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
      medium.putShort(e + HeapFormat.ROOT_NAME_LEN, (short) bytes.length);
      medium.put(e + HeapFormat.ROOT_NAME, bytes, 0, bytes.length);
      medium.flush(e, HeapFormat.ROOT_ENTRY);
      medium.drain();
      medium.putLong(metaOff + HeapFormat.M_ROOT_COUNT, i + 1);
      medium.persist(metaOff + HeapFormat.M_ROOT_COUNT, 8);
      index.put(name, i);
    }
    return entry(i) + HeapFormat.ROOT_VALUE;
  }
}
