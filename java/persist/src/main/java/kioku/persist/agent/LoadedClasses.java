package kioku.persist.agent;

import java.util.Collections;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The application classes this agent instrumented when they were defined, per loader (held
 * weakly). Retransforming one of them must add the same members again; any other class may
 * only get new method bodies.
 */
final class LoadedClasses {
  private final Map<ClassLoader, Set<String>> byLoader =
      Collections.synchronizedMap(new WeakHashMap<>());

  void add(ClassLoader loader, String internalName) {
    byLoader.computeIfAbsent(loader, l -> ConcurrentHashMap.newKeySet()).add(internalName);
  }

  boolean contains(ClassLoader loader, String internalName) {
    Set<String> names = byLoader.get(loader);
    return names != null && names.contains(internalName);
  }
}
