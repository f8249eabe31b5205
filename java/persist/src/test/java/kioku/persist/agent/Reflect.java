package kioku.persist.agent;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

/** Reflection shortcuts for driving sample classes defined by a {@link SampleLoader}. */
final class Reflect {
  private Reflect() {}

  static final String SAMPLES = "kioku.persisttest.samples.";

  static Class<?> load(ClassLoader loader, String simpleName) {
    try {
      return Class.forName(SAMPLES + simpleName, true, loader);
    } catch (ClassNotFoundException e) {
      throw new AssertionError(e);
    }
  }

  static Object construct(Class<?> c, Object... args) {
    try {
      for (var k : c.getDeclaredConstructors()) {
        if (k.getParameterCount() == args.length) {
          k.setAccessible(true);
          return k.newInstance(args);
        }
      }
      throw new AssertionError("no constructor with " + args.length + " parameters in " + c);
    } catch (InvocationTargetException e) {
      throw rethrow(e);
    } catch (ReflectiveOperationException e) {
      throw new AssertionError(e);
    }
  }

  static Object callStatic(Class<?> c, String name, Object... args) {
    return invoke(c, null, name, args);
  }

  static Object call(Object receiver, String name, Object... args) {
    return invoke(receiver.getClass(), receiver, name, args);
  }

  /** Calls the method of that name and arity declared in c or a superclass. */
  private static Object invoke(Class<?> c, Object receiver, String name, Object... args) {
    try {
      for (Class<?> k = c; k != null; k = k.getSuperclass()) {
        for (Method m : k.getDeclaredMethods()) {
          if (m.getName().equals(name) && m.getParameterCount() == args.length) {
            m.setAccessible(true);
            return m.invoke(receiver, args);
          }
        }
      }
      throw new AssertionError("no method " + name + " in " + c);
    } catch (InvocationTargetException e) {
      throw rethrow(e);
    } catch (ReflectiveOperationException e) {
      throw new AssertionError(e);
    }
  }

  static Object get(Object o, String field) {
    try {
      for (Class<?> k = o.getClass(); k != null; k = k.getSuperclass()) {
        try {
          Field f = k.getDeclaredField(field);
          f.setAccessible(true);
          return f.get(o);
        } catch (NoSuchFieldException e) {
          // up
        }
      }
      throw new AssertionError("no field " + field);
    } catch (IllegalAccessException e) {
      throw new AssertionError(e);
    }
  }

  private static RuntimeException rethrow(InvocationTargetException e) {
    Throwable t = e.getCause();
    if (t instanceof RuntimeException r) return r;
    if (t instanceof Error err) throw err;
    return new RuntimeException(t);
  }
}
