package kioku.persist.heap;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import kioku.persist.rt.FieldIds;
import kioku.persist.rt.Instrumented;
import kioku.persist.rt.Persistent;

/**
 * How the objects of one class are replicated: which fields, in which order, at which Unsafe
 * offsets; or why they cannot be. Computed once per class.
 *
 * <p>Fields are ordered from the topmost superclass down, each class's fields in reflection
 * order; a field keeps its slot in every subclass, so a putfield resolves to the same slot
 * whatever the runtime class. Application classes skip {@code transient} fields (Java's
 * "not part of the persistent state"); the supported JDK collections keep theirs, because
 * their real state (HashMap.table, ArrayList.elementData, ...) is transient for serialization's
 * sake. A few JDK fields that only cache derived values are not replicated and come back
 * empty: they are recomputed on use.
 */
final class Layout {
  enum Kind {
    OBJECT,
    ARRAY,
    STRING,
    ENUM,
    /** Not a class's layout: a descriptor of shared JDK instances (see Canonicals). */
    CANONICAL
  }

  /** One replicated field. {@code code} is its descriptor's first character (L for refs). */
  record Slot(Field field, long offset, char code, String key) {}

  private static final Set<Class<?>> IMMUTABLE_VALUES =
      Set.of(
          Integer.class,
          Long.class,
          Short.class,
          Byte.class,
          Character.class,
          Boolean.class,
          Float.class,
          Double.class);

  /**
   * Fields of JDK classes that are not replicated: caches of derived values (views), and the
   * transient state of lock-free structures that only means something while their threads
   * run (a resize in progress, spin locks, a waiting thread). Recovery gives them their
   * default, or what ConcurrentMaps computes.
   */
  private static final Map<String, Set<String>> CACHE_FIELDS =
      Map.of(
          "java.util.AbstractMap", Set.of("keySet", "values"),
          "java.util.HashMap", Set.of("entrySet"),
          "java.util.LinkedHashMap", Set.of("entrySet", "keySet", "values"),
          "java.util.TreeMap", Set.of("entrySet", "navigableKeySet", "descendingMap"),
          "java.util.EnumMap", Set.of("entrySet"),
          "java.util.concurrent.ConcurrentHashMap",
              Set.of("keySet", "values", "entrySet", "sizeCtl", "transferIndex", "cellsBusy", "nextTable"),
          "java.util.concurrent.ConcurrentHashMap$TreeBin", Set.of("lockState", "waiter"),
          "java.util.concurrent.atomic.Striped64", Set.of("cellsBusy"));

  private static final ClassValue<Layout> LAYOUTS =
      new ClassValue<>() {
        @Override
        protected Layout computeValue(Class<?> c) {
          return new Layout(c);
        }
      };

  static Layout of(Class<?> c) {
    return LAYOUTS.get(c);
  }

  /** The layout of an object's replica: an enum constant with a body uses its enum's. */
  static Layout of(Object o) {
    return o instanceof Enum<?> e ? LAYOUTS.get(e.getDeclaringClass()) : LAYOUTS.get(o.getClass());
  }

  /** The body word a slot is stored in (an enum's ordinal comes first). */
  int wordOfSlot(int slot) {
    return kind == Kind.ENUM ? slot + 1 : slot;
  }

  final Class<?> type;
  final Kind kind;
  final Slot[] slots;
  /** Array element: its descriptor character and size in bytes. */
  final char elementCode;

  final int elementSize;
  final long arrayBase;
  /** Bytes per element in the JVM's own array (4 for references with compressed oops). */
  final int arrayScale;
  /** Null when the class can be replicated, else why not (one line). */
  final String refusal;

  /** The class id in the class table that last asked (see ClassTable.idOf). */
  record ClassId(Object table, int id) {}

  volatile ClassId classId;

  /** fieldId → slot index; -2 unresolved, -1 not replicated. Grown on demand. */
  private volatile int[] slotOfField = new int[0];

  private Layout(Class<?> c) {
    this.type = c;
    if (c.isArray()) {
      kind = Kind.ARRAY;
      Class<?> comp = c.getComponentType();
      elementCode = codeOf(comp);
      elementSize = sizeOf(elementCode);
      arrayBase = Unsafes.U.arrayBaseOffset(c);
      arrayScale = Unsafes.U.arrayIndexScale(c);
      slots = new Slot[0];
      refusal = null;
      return;
    }
    elementCode = 0;
    elementSize = 0;
    arrayBase = 0;
    arrayScale = 0;
    if (c == String.class) {
      kind = Kind.STRING;
      slots = new Slot[0];
      refusal = null;
      return;
    }
    if (c.isEnum()) {
      // Its constants come back as themselves; their mutable fields (not final, not
      // transient) are persisted like an object's. Final ones come from the running class.
      kind = Kind.ENUM;
      List<Slot> list = new ArrayList<>();
      boolean jdk = isJdk(c);
      for (Field f : c.getDeclaredFields()) {
        int m = f.getModifiers();
        if (Modifier.isStatic(m) || Modifier.isFinal(m) || f.getName().startsWith("$kioku$")) continue;
        if (!jdk && Modifier.isTransient(m)) continue;
        list.add(
            new Slot(
                f,
                Unsafes.fieldOffset(f),
                codeOf(f.getType()),
                c.getName() + "#" + f.getName() + ":" + descriptorOf(f.getType())));
      }
      slots = list.toArray(new Slot[0]);
      refusal =
          slots.length > 0
                  && (jdk || !Persistent.class.isAssignableFrom(c) || Instrumented.skipped(c))
              ? c.getName() + " is an enum with mutable fields whose writes the agent does not"
                  + " see (a JDK enum, or not instrumented): it cannot be persistent"
              : null;
      return;
    }
    kind = Kind.OBJECT;
    String why = refusalOf(c);
    List<Slot> list = new ArrayList<>();
    if (why == null) {
      List<Class<?>> chain = new ArrayList<>();
      for (Class<?> k = c; k != null && k != Object.class; k = k.getSuperclass()) chain.add(0, k);
      for (Class<?> k : chain) {
        boolean jdk = isJdk(k);
        Set<String> caches = jdk
            ? (JdkValues.isImmutable(k) ? JdkValues.caches(k) : CACHE_FIELDS.getOrDefault(k.getName(), Set.of()))
            : Set.of();
        for (Field f : k.getDeclaredFields()) {
          int m = f.getModifiers();
          if (Modifier.isStatic(m) || f.getName().startsWith("$kioku$")) continue;
          if (!jdk && Modifier.isTransient(m)) continue;
          if (caches.contains(f.getName())) continue;
          long offset;
          try {
            offset = Unsafes.fieldOffset(f);
          } catch (UnsupportedOperationException e) {
            why = c.getName() + ": " + e.getMessage();
            break;
          }
          list.add(
              new Slot(
                  f,
                  offset,
                  codeOf(f.getType()),
                  k.getName() + "#" + f.getName() + ":" + descriptorOf(f.getType())));
        }
      }
    }
    slots = why == null ? list.toArray(new Slot[0]) : new Slot[0];
    refusal = why;
  }

  /** Bytes of the replica of {@code o} (an instance of this class). */
  long replicaSize(Object o) {
    return switch (kind) {
      case OBJECT -> HeapFormat.HEADER + 8L * slots.length;
      case ENUM -> HeapFormat.HEADER + 8L * (1 + slots.length);
      case CANONICAL -> throw new IllegalStateException("not a class layout");
      case ARRAY -> align8(HeapFormat.HEADER + (long) java.lang.reflect.Array.getLength(o) * elementSize);
      case STRING -> align8(HeapFormat.HEADER + 1 + Strings.byteLength((String) o));
    };
  }

  static long align8(long n) {
    return (n + 7) & ~7L;
  }

  /** The slot of the field at this Unsafe offset, or -1 if that field is not replicated. */
  int slotAtOffset(long offset) {
    for (int i = 0; i < slots.length; i++) if (slots[i].offset() == offset) return i;
    return -1;
  }

  /** The slot a putfield with this field id writes, or -1 if that field is not replicated. */
  int slotOf(int fieldId) {
    int[] map = slotOfField;
    if (fieldId < map.length && map[fieldId] != -2) return map[fieldId];
    return resolve(fieldId);
  }

  private synchronized int resolve(int fieldId) {
    int[] map = slotOfField;
    if (fieldId >= map.length) {
      int[] bigger = new int[Math.max(fieldId + 1, map.length * 2)];
      java.util.Arrays.fill(bigger, -2);
      System.arraycopy(map, 0, bigger, 0, map.length);
      map = bigger;
    }
    FieldIds.FieldRef ref = FieldIds.WRITTEN.get(fieldId);
    int found = -1;
    // The owner in bytecode may be a subclass of the declaring class: start there, walk up.
    boolean below = true;
    for (Class<?> k = type; k != null && found < 0; k = k.getSuperclass()) {
      if (below && !k.getName().replace('.', '/').equals(ref.owner())) continue;
      below = false;
      for (int i = 0; i < slots.length; i++) {
        Field f = slots[i].field;
        if (f.getDeclaringClass() == k && f.getName().equals(ref.name())) {
          found = i;
          break;
        }
      }
      if (found < 0 && declares(k, ref.name())) break; // declared here but not replicated
    }
    map[fieldId] = found;
    slotOfField = map;
    return found;
  }

  private static boolean declares(Class<?> k, String name) {
    for (Field f : k.getDeclaredFields()) if (f.getName().equals(name)) return true;
    return false;
  }

  /** Null if objects of {@code c} (not an array, String or enum) can be replicated. */
  private static String refusalOf(Class<?> c) {
    if (c.isHidden()) {
      return c.getName() + " is a hidden class (a lambda or proxy): it cannot be persistent;"
          + " store a named class instead";
    }
    if (IMMUTABLE_VALUES.contains(c)) return null;
    if (c == Class.class) {
      return "java.lang.Class: only classes that can be loaded by name can be persistent (not"
          + " hidden classes such as lambdas' and proxies')";
    }
    for (Class<?> k = c; k != null && k != Object.class; k = k.getSuperclass()) {
      if (isJdk(k)) {
        if (!hasInstanceFields(k) || Instrumented.isSupportedJdkClass(k)) continue;
        if (JdkValues.isImmutable(k)) {
          String why = JdkValues.refusalOf(k);
          if (why != null) return why;
          continue;
        }
        return c.getName()
            + (k == c ? "" : " (through its superclass " + k.getName() + ")")
            + ": the agent cannot intercept writes to this JDK class, so it cannot be persistent;"
            + " use the supported collections (docs/persist.md), String, boxed values, BigDecimal,"
            + " java.time, arrays, records or your own classes";
      }
      if (!Persistent.class.isAssignableFrom(k) || Instrumented.skipped(k)) {
        return c.getName()
            + (k == c ? "" : " (through its superclass " + k.getName() + ")")
            + " was not instrumented by the kioku agent (loaded before it started, or"
            + " excluded): run with -javaagent:kioku-persist.jar";
      }
    }
    return null;
  }

  private static boolean hasInstanceFields(Class<?> k) {
    for (Field f : k.getDeclaredFields()) if (!Modifier.isStatic(f.getModifiers())) return true;
    return false;
  }

  static boolean isJdk(Class<?> k) {
    ClassLoader l = k.getClassLoader();
    if (l == null || l == ClassLoader.getPlatformClassLoader()) {
      String n = k.getName();
      return n.startsWith("java.") || n.startsWith("javax.") || n.startsWith("jdk.")
          || n.startsWith("sun.") || n.startsWith("com.sun.");
    }
    return false;
  }

  static char codeOf(Class<?> t) {
    if (!t.isPrimitive()) return 'L';
    if (t == int.class) return 'I';
    if (t == long.class) return 'J';
    if (t == boolean.class) return 'Z';
    if (t == byte.class) return 'B';
    if (t == char.class) return 'C';
    if (t == short.class) return 'S';
    if (t == float.class) return 'F';
    if (t == double.class) return 'D';
    throw new IllegalArgumentException("void field");
  }

  static int sizeOf(char code) {
    return switch (code) {
      case 'Z', 'B' -> 1;
      case 'C', 'S' -> 2;
      case 'I', 'F' -> 4;
      default -> 8;
    };
  }

  static String descriptorOf(Class<?> t) {
    if (t.isArray()) return t.getName().replace('.', '/');
    if (t.isPrimitive()) return String.valueOf(codeOf(t));
    return "L" + t.getName().replace('.', '/') + ";";
  }

  /** The field's value as 64 bits (references are not read here). */
  static long readBits(Object o, Slot s) {
    long off = s.offset;
    return switch (s.code) {
      case 'Z' -> Unsafes.U.getBoolean(o, off) ? 1 : 0;
      case 'B' -> Unsafes.U.getByte(o, off) & 0xffL;
      case 'C' -> Unsafes.U.getChar(o, off);
      case 'S' -> Unsafes.U.getShort(o, off) & 0xffffL;
      case 'I', 'F' -> Unsafes.U.getInt(o, off) & 0xffffffffL;
      case 'J', 'D' -> Unsafes.U.getLong(o, off);
      default -> throw new IllegalArgumentException("reference slot");
    };
  }

  /** Stores 64 bits into the field (recovery; works on final fields too). */
  static void writeBits(Object o, Slot s, long bits) {
    long off = s.offset;
    switch (s.code) {
      case 'Z' -> Unsafes.U.putBoolean(o, off, bits != 0);
      case 'B' -> Unsafes.U.putByte(o, off, (byte) bits);
      case 'C' -> Unsafes.U.putChar(o, off, (char) bits);
      case 'S' -> Unsafes.U.putShort(o, off, (short) bits);
      case 'I', 'F' -> Unsafes.U.putInt(o, off, (int) bits);
      case 'J', 'D' -> Unsafes.U.putLong(o, off, bits);
      default -> throw new IllegalArgumentException("reference slot");
    }
  }
}
