package kioku.stress;

import java.lang.invoke.VarHandle;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import kioku.persist.KiokuPersist;

/**
 * Turns {@link KiokuPersist#verify} into a jcstress outcome: {@code "OK"} when every object
 * reachable from the given roots has a replica equal to it, else {@code "BAD: "}, the verify
 * root and the first difference, with the test's names for its objects (identity hashes of
 * other objects removed, so equal failures count as one outcome), how many differences there
 * were, and {@code [transient]} if a second verify right after found none.
 */
public final class Check {
  private Check() {}

  public static final String OK = "OK";

  /** Names for a state's objects, used in the outcome instead of identity hashes. */
  public static final class Names {
    final Map<Object, String> names = new IdentityHashMap<>();

    public Names add(String name, Object o) {
      if (o != null) names.putIfAbsent(o, name);
      return this;
    }

    String label(Object o) {
      String n = names.get(o);
      return n != null ? n : "?";
    }

    String rewrite(String line) {
      for (Map.Entry<Object, String> e : names.entrySet()) {
        Object o = e.getKey();
        String id = o.getClass().getName() + "@" + Integer.toHexString(System.identityHashCode(o));
        line = line.replace(id, e.getValue() + "(" + o.getClass().getSimpleName() + ")");
      }
      return line.replaceAll("@[0-9a-f]+", "").replace("kioku.stress.", "");
    }
  }

  public static String replicas(Object... roots) {
    return replicas(new Names(), roots);
  }

  /** Verifies each root in turn; the outcome as described above. */
  public static String replicas(Names names, Object... roots) {
    List<String> bad = new ArrayList<>();
    Object firstBadRoot = null;
    for (Object r : roots) {
      List<String> b = KiokuPersist.verify(r);
      if (!b.isEmpty() && firstBadRoot == null) firstBadRoot = r;
      bad.addAll(b);
    }
    if (bad.isEmpty()) return OK;
    VarHandle.fullFence();
    boolean again = false;
    for (Object r : roots) again |= !KiokuPersist.verify(r).isEmpty();
    return "BAD: from " + names.label(firstBadRoot) + ": " + names.rewrite(bad.get(0))
        + (bad.size() > 1 ? " (+" + (bad.size() - 1) + " more)" : "")
        + (again ? "" : " [transient]");
  }
}
