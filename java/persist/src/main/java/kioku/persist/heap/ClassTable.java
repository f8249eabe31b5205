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
  /**
   * A class as the heap recorded it. {@code slots}: the keys of the replicated fields (objects
   * and enums); {@code constants}: an enum's constant names in ordinal order. A canonical
   * descriptor's name says which shared instance (see Canonicals).
   */
  record Descriptor(int id, Layout.Kind kind, String name, List<String> constants, List<String> slots) {
    /** Which body words hold references (objects: the slots; enums: after the ordinal). */
    boolean[] referenceWords() {
      int first = kind == Layout.Kind.ENUM ? 1 : 0;
      boolean[] refs = new boolean[first + slots.size()];
      for (int i = 0; i < slots.size(); i++) {
        String e = slots.get(i);
        char c = e.charAt(e.lastIndexOf(':') + 1);
        refs[first + i] = c == 'L' || c == '[';
      }
      return refs;
    }

    /** Body words a replica of this class has, for objects, enums and canonical boxes. */
    long bodyWords() {
      return switch (kind) {
        case OBJECT -> slots.size();
        case ENUM -> 1 + slots.size();
        case CANONICAL -> name.startsWith(Canonicals.BOX) ? 1 : 0;
        default -> -1;
      };
    }

    /** For an array: the element's descriptor character ('L' for references). */
    char elementCode() {
      char c = name.charAt(1);
      return c == '[' ? 'L' : c;
    }

    /** The bytes of a replica of this class whose header holds {@code count}. */
    long replicaSize(long count) {
      return switch (kind) {
        case OBJECT, ENUM, CANONICAL -> HeapFormat.HEADER + 8 * count;
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
  /**
   * {@link #byId} for readers outside the table's monitor (make_persistent threads, marking):
   * replaced whole when a class is appended, which is rare.
   */
  private volatile Descriptor[] snapshot = new Descriptor[0];
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
  synchronized void load() throws HeapException {
    long count = HeapFormat.count(medium.getLong(metaOff + HeapFormat.M_CLASS_COUNT));
    if (count < 0) throw damaged("the class count does not check");
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
      byKey.putIfAbsent(key(d), d.id);
      at += Layout.align8(HeapFormat.RECORD_HEADER + len);
    }
    tail = at;
    snapshot = byId.toArray(new Descriptor[0]);
  }

  private static HeapException damaged(String what) {
    return new HeapException(
        HeapException.Reason.DAMAGED,
        "persistent heap damaged: class table: " + what + "; restore the pool from a backup");
  }

  Descriptor get(int id) {
    Descriptor[] t = snapshot;
    return id >= 1 && id <= t.length ? t[id - 1] : null;
  }

  int size() {
    return snapshot.length;
  }

  /** The id of the layout's class, appending its descriptor durably the first time. */
  int idOf(Layout layout, Class<?> c) throws HeapException {
    // The layout remembers its id in the last heap that asked (the common case: one heap).
    Layout.ClassId cached = layout.classId;
    if (cached != null && cached.table() == this) return cached.id();
    return idOfSlow(layout, c);
  }

  private synchronized int idOfSlow(Layout layout, Class<?> c) throws HeapException {
    Integer known = ids.get(c);
    if (known != null) {
      layout.classId = new Layout.ClassId(this, known);
      return known;
    }
    List<String> slots = new ArrayList<>();
    List<String> constants = new ArrayList<>();
    for (Layout.Slot s : layout.slots) slots.add(s.key());
    if (layout.kind == Layout.Kind.ENUM) {
      for (Object e : c.getEnumConstants()) constants.add(((Enum<?>) e).name());
    }
    int id = idOf(new Descriptor(0, layout.kind, c.getName(), constants, slots));
    ids.put(c, id);
    layout.classId = new Layout.ClassId(this, id);
    return id;
  }

  private final Map<String, Integer> canonicalIds = new HashMap<>();

  /** The id of a canonical instance's descriptor (named as Canonicals names it). */
  synchronized int idOfCanonical(String name) throws HeapException {
    Integer known = canonicalIds.get(name);
    if (known != null) return known;
    int id = idOf(new Descriptor(0, Layout.Kind.CANONICAL, name, List.of(), List.of()));
    canonicalIds.put(name, id);
    return id;
  }

  private int idOf(Descriptor wanted) throws HeapException {
    Integer id = byKey.get(key(wanted));
    if (id != null) return id;
    return append(
        new Descriptor(byId.size() + 1, wanted.kind, wanted.name, wanted.constants, wanted.slots));
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
    medium.putLong(metaOff + HeapFormat.M_CLASS_COUNT, HeapFormat.countWord(byId.size() + 1));
    medium.persist(metaOff + HeapFormat.M_CLASS_COUNT, 8);
    tail += need;
    byId.add(d);
    byKey.put(key(d), d.id);
    snapshot = byId.toArray(new Descriptor[0]);
    return d.id;
  }

  private static String key(Descriptor d) {
    return d.kind + " " + d.name + " " + String.join(",", d.constants) + " " + String.join(",", d.slots);
  }

  private static byte[] encode(Descriptor d) {
    try {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      DataOutputStream out = new DataOutputStream(bytes);
      out.writeByte(d.kind.ordinal());
      out.writeUTF(d.name);
      out.writeInt(d.constants.size());
      for (String e : d.constants) out.writeUTF(e);
      out.writeInt(d.slots.size());
      for (String e : d.slots) out.writeUTF(e);
      return bytes.toByteArray();
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  private static List<String> strings(DataInputStream in) throws IOException {
    int n = in.readInt();
    if (n < 0 || n > 1 << 20) throw new IOException("count " + n);
    List<String> out = new ArrayList<>(Math.min(n, 1024));
    for (int i = 0; i < n; i++) out.add(in.readUTF());
    return List.copyOf(out);
  }

  private static Descriptor decode(int id, byte[] payload) throws HeapException {
    try {
      DataInputStream in = new DataInputStream(new java.io.ByteArrayInputStream(payload));
      int kind = in.readUnsignedByte();
      if (kind >= Layout.Kind.values().length) throw damaged("descriptor " + id + " kind " + kind);
      String name = in.readUTF();
      return new Descriptor(id, Layout.Kind.values()[kind], name, strings(in), strings(in));
    } catch (IOException e) {
      throw damaged("descriptor " + id + " unreadable");
    }
  }
}
