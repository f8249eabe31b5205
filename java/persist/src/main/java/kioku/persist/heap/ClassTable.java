package kioku.persist.heap;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32C;
import kioku.persist.pool.Medium;

/**
 * The class descriptors of the replicas: name, kind and field layout, appended to the
 * persist.classes log and never changed, so recovery can load each class by name and check that
 * its fields still match (and say which class and field do not). A descriptor is durable before
 * the first replica that names it.
 */
final class ClassTable {
  /** A class as the heap recorded it. {@code entries}: slot keys, or enum constant names. */
  record Descriptor(int id, Layout.Kind kind, String name, List<String> entries) {
    /** For an object: which slots hold references. */
    boolean[] referenceSlots() {
      boolean[] refs = new boolean[entries.size()];
      for (int i = 0; i < refs.length; i++) {
        String e = entries.get(i);
        char c = e.charAt(e.lastIndexOf(':') + 1);
        refs[i] = c == 'L' || c == '[';
      }
      return refs;
    }

    /** For an array: the element's descriptor character ('L' for references). */
    char elementCode() {
      char c = name.charAt(1);
      return c == '[' ? 'L' : c;
    }

    /** The bytes of a replica of this class whose header holds {@code count}. */
    long replicaSize(long count) {
      return switch (kind) {
        case OBJECT -> HeapFormat.HEADER + 8 * count;
        case ENUM -> HeapFormat.HEADER + 8;
        case ARRAY -> Layout.align8(HeapFormat.HEADER + count * Layout.sizeOf(elementCode()));
        case STRING -> Layout.align8(HeapFormat.HEADER + 1 + count);
      };
    }
  }

  private final Medium medium;
  private final long metaOff;
  private final long logOff;
  private final long logLen;
  private final List<Descriptor> byId = new ArrayList<>();
  private final Map<String, Integer> byKey = new HashMap<>();
  private long tail; // offset in the log of the next record
  private final Map<Class<?>, Integer> ids = new HashMap<>();

  ClassTable(Medium medium, long metaOff, long logOff, long logLen) {
    this.medium = medium;
    this.metaOff = metaOff;
    this.logOff = logOff;
    this.logLen = logLen;
  }

  /** Reads the committed descriptors. */
  void load() throws HeapException {
    long count = medium.getLong(metaOff + HeapFormat.M_CLASS_COUNT);
    long at = 0;
    for (long i = 0; i < count; i++) {
      if (at + HeapFormat.RECORD_HEADER > logLen) throw damaged("descriptor " + (i + 1) + " past the log");
      int len = medium.getInt(logOff + at);
      int crc = medium.getInt(logOff + at + 4);
      if (len <= 0 || at + HeapFormat.RECORD_HEADER + len > logLen) {
        throw damaged("descriptor " + (i + 1) + " has length " + len);
      }
      byte[] payload = new byte[len];
      medium.get(logOff + at + HeapFormat.RECORD_HEADER, payload, 0, len);
      CRC32C c = new CRC32C();
      c.update(payload);
      if ((int) c.getValue() != crc) throw damaged("descriptor " + (i + 1) + " checksum mismatch");
      Descriptor d = decode((int) i + 1, payload);
      byId.add(d);
      byKey.putIfAbsent(key(d.kind, d.name, d.entries), d.id);
      at += Layout.align8(HeapFormat.RECORD_HEADER + len);
    }
    tail = at;
  }

  private static HeapException damaged(String what) {
    return new HeapException(
        HeapException.Reason.DAMAGED,
        "persistent heap damaged: class table: " + what + "; restore the pool from a backup");
  }

  Descriptor get(int id) {
    return id >= 1 && id <= byId.size() ? byId.get(id - 1) : null;
  }

  int size() {
    return byId.size();
  }

  /** The id of the layout's class, appending its descriptor durably the first time. */
  int idOf(Layout layout, Class<?> c) throws HeapException {
    // The layout remembers its id in the last heap that asked (the common case: one heap).
    Layout.ClassId cached = layout.classId;
    if (cached != null && cached.table() == this) return cached.id();
    Integer known = ids.get(c);
    if (known != null) {
      layout.classId = new Layout.ClassId(this, known);
      return known;
    }
    List<String> entries = new ArrayList<>();
    if (layout.kind == Layout.Kind.OBJECT) {
      for (Layout.Slot s : layout.slots) entries.add(s.key());
    } else if (layout.kind == Layout.Kind.ENUM) {
      for (Object e : c.getEnumConstants()) entries.add(((Enum<?>) e).name());
    }
    String k = key(layout.kind, c.getName(), entries);
    Integer id = byKey.get(k);
    if (id == null) {
      id = append(new Descriptor(byId.size() + 1, layout.kind, c.getName(), entries));
    }
    ids.put(c, id);
    layout.classId = new Layout.ClassId(this, id);
    return id;
  }

  private int append(Descriptor d) throws HeapException {
    byte[] payload = encode(d);
    long need = Layout.align8(HeapFormat.RECORD_HEADER + payload.length);
    if (tail + need > logLen) {
      throw new HeapException(
          HeapException.Reason.FULL,
          "persistent heap: the class table is full (" + byId.size() + " classes); "
              + "create the pool with a larger classes= size");
    }
    CRC32C c = new CRC32C();
    c.update(payload);
    ByteBuffer h = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
    h.putInt(payload.length).putInt((int) c.getValue());
    medium.put(logOff + tail, h.array(), 0, 8);
    medium.put(logOff + tail + 8, payload, 0, payload.length);
    medium.flush(logOff + tail, need);
    medium.drain();
    // The count is the commit of the record: one 8-byte store.
    medium.putLong(metaOff + HeapFormat.M_CLASS_COUNT, byId.size() + 1);
    medium.persist(metaOff + HeapFormat.M_CLASS_COUNT, 8);
    tail += need;
    byId.add(d);
    byKey.put(key(d.kind, d.name, d.entries), d.id);
    return d.id;
  }

  private static String key(Layout.Kind kind, String name, List<String> entries) {
    return kind + " " + name + " " + String.join(",", entries);
  }

  private static byte[] encode(Descriptor d) {
    try {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      DataOutputStream out = new DataOutputStream(bytes);
      out.writeByte(d.kind.ordinal());
      out.writeUTF(d.name);
      out.writeInt(d.entries.size());
      for (String e : d.entries) out.writeUTF(e);
      return bytes.toByteArray();
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  private static Descriptor decode(int id, byte[] payload) throws HeapException {
    try {
      DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(payload));
      int kind = in.readUnsignedByte();
      if (kind >= Layout.Kind.values().length) throw damaged("descriptor " + id + " kind " + kind);
      String name = in.readUTF();
      int n = in.readInt();
      List<String> entries = new ArrayList<>(n);
      for (int i = 0; i < n; i++) entries.add(in.readUTF());
      return new Descriptor(id, Layout.Kind.values()[kind], name, List.copyOf(entries));
    } catch (IOException e) {
      throw damaged("descriptor " + id + " unreadable");
    }
  }
}
