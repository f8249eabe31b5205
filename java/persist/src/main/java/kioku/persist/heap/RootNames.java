package kioku.persist.heap;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.LinkedHashMap;
import java.util.Map;
import kioku.persist.DurableRoot;
import kioku.persist.PersistenceException;

/**
 * What became of roots whose name changed. A root is found by "binary.Class#field"; a pool that
 * holds data under a name the program no longer declares is refused at start, unless the
 * program says where it went: {@code @DurableRoot(formerly = ...)} on the new field, or the
 * agent option {@code roots=Old#f>New#g;Gone#h>-} (applied when the pool opens; {@code -} drops
 * the data). Never a silent fresh start.
 */
public final class RootNames {
  /** No renames from outside. */
  public static final RootNames NONE = new RootNames(Map.of());

  private final Map<String, String> moves;

  private RootNames(Map<String, String> moves) {
    this.moves = moves;
  }

  /**
   * Parses {@code Old#f>New#g;Gone#h>-}.
   *
   * @throws IllegalArgumentException for a malformed entry
   */
  public static RootNames parse(String spec) {
    if (spec == null || spec.isBlank()) return NONE;
    Map<String, String> m = new LinkedHashMap<>();
    for (String part : spec.split(";")) {
      int gt = part.indexOf('>');
      String from = gt < 0 ? "" : part.substring(0, gt).trim();
      String to = gt < 0 ? "" : part.substring(gt + 1).trim();
      if (from.indexOf('#') <= 0 || (!to.equals("-") && to.indexOf('#') <= 0)) {
        throw new IllegalArgumentException(
            "agent option roots: '" + part + "' is not Old.Class#field>New.Class#field (or >- to"
                + " drop a root's data)");
      }
      m.put(from, to);
    }
    return new RootNames(Map.copyOf(m));
  }

  /** Whether {@link #apply} may have changed a root (then the heap is marked again). */
  boolean changedRoots() {
    return !moves.isEmpty();
  }

  /** Applies the option's moves to the root table (at open, before anything reads roots). */
  void apply(PersistentHeap h) throws HeapException {
    for (Map.Entry<String, String> e : moves.entrySet()) {
      String from = e.getKey();
      long value = h.rootTable().get(from);
      if (value == 0) continue;
      String to = e.getValue();
      if (to.equals("-")) {
        h.clearRoot(from);
        continue;
      }
      long there = h.rootTable().get(to);
      if (there != 0 && there != value) {
        throw new HeapException(
            HeapException.Reason.INCOMPATIBLE_CLASS,
            "agent option roots=" + from + ">" + to + ": " + to + " already holds other data;"
                + " drop one of them (roots=" + from + ">-) or map it elsewhere");
      }
      h.moveRoot(from, to);
    }
  }

  /**
   * The former name, with data in the pool, of root field {@code f} of {@code c} (from its
   * {@code formerly}), or null.
   */
  String formerNameWithData(PersistentHeap h, Class<?> c, Field f) {
    DurableRoot a = f.getAnnotation(DurableRoot.class);
    if (a == null) return null;
    for (String former : a.formerly()) {
      String name = qualified(c, former);
      if (h.rootTable().get(name) != 0) return name;
    }
    return null;
  }

  private static String qualified(Class<?> c, String name) {
    return name.indexOf('#') >= 0 ? name : c.getName() + "#" + name;
  }

  /**
   * Refuses a pool holding data under a root name that the program's classes (loaded, not
   * initialized, through {@code loader}) no longer declare and no {@code formerly} claims.
   * Only roots of classes the loader can see are checked: a class it cannot load may come from
   * a class loader made later (its heap then waits, see PersistentHeap.recoverEagerly).
   */
  void checkDeclared(PersistentHeap h, ClassLoader loader, boolean strict) {
    for (Map.Entry<String, Long> r : h.rootTable().all().entrySet()) {
      if (r.getValue() == 0) continue;
      String name = r.getKey();
      int hash = name.indexOf('#');
      String owner = name.substring(0, hash);
      String field = name.substring(hash + 1);
      Class<?> c;
      try {
        c = Class.forName(owner, false, loader);
      } catch (ClassNotFoundException | LinkageError e) {
        if (!strict) continue;
        throw unclaimed(name, "class " + owner + " is not on the class path");
      }
      if (declares(c, field) || claimed(c, name)) continue;
      throw unclaimed(name, owner + " declares no @DurableRoot field '" + field + "'");
    }
  }

  private static boolean declares(Class<?> c, String field) {
    try {
      Field f = c.getDeclaredField(field);
      return Modifier.isStatic(f.getModifiers()) && f.isAnnotationPresent(DurableRoot.class);
    } catch (NoSuchFieldException e) {
      return false;
    }
  }

  private static boolean claimed(Class<?> c, String name) {
    for (Field f : c.getDeclaredFields()) {
      DurableRoot a = f.getAnnotation(DurableRoot.class);
      if (a == null) continue;
      for (String former : a.formerly()) if (qualified(c, former).equals(name)) return true;
    }
    return false;
  }

  private static PersistenceException unclaimed(String name, String why) {
    return new PersistenceException(
        "durable root " + name + " holds data but " + why + ": if it was renamed or moved, say"
            + " so with @DurableRoot(formerly = \"" + name + "\") on the new field, or the agent"
            + " option roots=" + name + ">New.Class#field; to drop its data, roots=" + name + ">-");
  }
}
