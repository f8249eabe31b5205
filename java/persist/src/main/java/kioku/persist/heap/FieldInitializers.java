package kioku.persist.heap;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import kioku.persist.PersistenceException;

/**
 * Gives a field that was added to a class since its objects were written the value a
 * constructor gives it. The agent copies, from each constructor, the stores to fields that do
 * not depend on the constructor's arguments (javac puts field initializers there, right after
 * the super() call) into a synthetic method {@code $kioku$init$<field>()}; recovery runs it on
 * every recovered object whose replica lacks the field, before moving the object to a replica
 * of the current layout (so it runs once, at the first start of the new version). A field
 * without such a method keeps its default value; if constructors do set it (from their
 * arguments, or in a way that cannot be replayed), a warning says so once.
 */
final class FieldInitializers {
  private FieldInitializers() {}

  static final String PREFIX = "$kioku$init$";
  /** Static method of instrumented classes: names of fields constructors set in other ways. */
  static final String UNREPLAYABLE = "$kioku$unreplayable";

  private static final System.Logger LOG = System.getLogger("kioku.persist");
  private static final Set<String> warned = ConcurrentHashMap.newKeySet();

  private static final ClassValue<Object> NONE = new ClassValue<>() {
    @Override
    protected Object computeValue(Class<?> type) {
      return new Object();
    }
  };

  /** Runs the initializers of {@code added} fields on a recovered object. */
  static void run(Object o, Class<?> c, List<Layout.Slot> added) {
    for (Layout.Slot s : added) {
      Class<?> owner = s.field().getDeclaringClass();
      String name = s.field().getName();
      Method m = method(owner, PREFIX + name);
      if (m == null) {
        if (unreplayable(owner).contains(name) && warned.add(owner.getName() + "#" + name)) {
          LOG.log(System.Logger.Level.WARNING,
              "kioku-persist: field " + owner.getName() + "." + name + " was added since the"
                  + " pool was written, and constructors set it from their arguments: recovered"
                  + " objects hold its default value");
        }
        continue;
      }
      try {
        m.invoke(o);
      } catch (InvocationTargetException e) {
        throw new PersistenceException(
            "cannot recover the persistent heap: the initializer of field " + owner.getName() + "."
                + name + " (added since the pool was written) threw " + e.getCause()
                + "; make it work on a recovered object, or start with a new pool",
            e.getCause());
      } catch (IllegalAccessException e) {
        throw new IllegalStateException(e);
      }
    }
  }

  private static Method method(Class<?> owner, String name) {
    try {
      Method m = owner.getDeclaredMethod(name);
      m.setAccessible(true);
      return m;
    } catch (NoSuchMethodException | RuntimeException e) {
      return null;
    }
  }

  private static Set<String> unreplayable(Class<?> owner) {
    Method m = method(owner, UNREPLAYABLE);
    if (m == null) return Set.of();
    try {
      String names = (String) m.invoke(null);
      return names.isEmpty() ? Set.of() : Set.of(names.split(","));
    } catch (ReflectiveOperationException | RuntimeException e) {
      return Set.of();
    }
  }
}
