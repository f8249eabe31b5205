package kioku.persist.agent;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayDeque;
import java.util.Collections;
import java.util.HashSet;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Facts about classes other than the one being transformed (is a field volatile, is it a
 * durable root, where is clone() declared), read from their class files through the defining
 * loader's resources. A transformer must never load classes: that could recurse into the class
 * being defined, or define a class early through the wrong loader. Results are cached per
 * loader (weakly, so loaders can be collected).
 */
final class ClassInfoSource {
  /** Bound on superclass chains, against malformed input. */
  private static final int MAX_DEPTH = 256;

  private final Map<String, Optional<ClassInfo>> boot = new ConcurrentHashMap<>();
  private final Map<ClassLoader, Map<String, Optional<ClassInfo>>> byLoader =
      Collections.synchronizedMap(new WeakHashMap<>());

  /** The class as {@code loader} would define it, or null if its class file is unreadable. */
  ClassInfo find(ClassLoader loader, String internalName) {
    Map<String, Optional<ClassInfo>> cache =
        loader == null ? boot : byLoader.computeIfAbsent(loader, l -> new ConcurrentHashMap<>());
    Optional<ClassInfo> info = cache.get(internalName);
    if (info == null) {
      byte[] bytes = classFile(loader, internalName);
      info = Optional.ofNullable(bytes == null ? null : ClassInfoReader.read(bytes, false));
      cache.putIfAbsent(internalName, info);
    }
    return info.orElse(null);
  }

  /** The bytes of {@code internalName}.class as seen by {@code loader} (null: the boot loader). */
  static byte[] classFile(ClassLoader loader, String internalName) {
    String resource = internalName + ".class";
    // The platform loader delegates resource lookups to the boot loader, which has no
    // ClassLoader object of its own; .class resources are never encapsulated by modules.
    ClassLoader l = loader != null ? loader : ClassLoader.getPlatformClassLoader();
    try (InputStream in = l.getResourceAsStream(resource)) {
      return in == null ? null : in.readAllBytes();
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  /**
   * A field as the JVM resolves {@code owner.name:desc} for putfield/putstatic: in owner, then
   * its superclasses. {@code self} stands for the class being transformed (not yet loadable).
   *
   * @return the declaring class and the field, or the unresolved owner (field null) if some
   *     class file on the way could not be read
   */
  Resolved resolveField(ClassLoader loader, ClassInfo self, String owner, String name, String desc) {
    String current = owner;
    for (int depth = 0; current != null && depth < MAX_DEPTH; depth++) {
      ClassInfo info = lookup(loader, self, current);
      if (info == null) break;
      FieldInfo f = info.field(name, desc);
      if (f != null) return new Resolved(info.name(), f);
      current = info.superName();
    }
    return new Resolved(owner, null);
  }

  /** A field resolution's result; {@code field} is null when it could not be found. */
  record Resolved(String owner, FieldInfo field) {}

  /**
   * The class declaring the method that a virtual call of {@code owner.name desc} reaches
   * first going up from {@code owner}, or null if unknown.
   */
  String declarerOf(ClassLoader loader, ClassInfo self, String owner, String name, String desc) {
    String current = owner;
    for (int depth = 0; current != null && depth < MAX_DEPTH; depth++) {
      ClassInfo info = lookup(loader, self, current);
      if (info == null) return null;
      if (info.declaresMethod(name, desc)) return current;
      current = info.superName();
    }
    return null;
  }

  /**
   * Whether {@code type} is {@code target} or extends/implements it; unknown parts of the
   * hierarchy count as "yes" when {@code unknownIsYes}.
   */
  boolean isSubtypeOf(
      ClassLoader loader, ClassInfo self, String type, String target, boolean unknownIsYes) {
    Set<String> seen = new HashSet<>();
    ArrayDeque<String> todo = new ArrayDeque<>();
    todo.add(type);
    while (!todo.isEmpty()) {
      String t = todo.poll();
      if (t.equals(target)) return true;
      if (!seen.add(t) || seen.size() > MAX_DEPTH) continue;
      ClassInfo info = lookup(loader, self, t);
      if (info == null) {
        if (unknownIsYes) return true;
        continue;
      }
      if (info.superName() != null) todo.add(info.superName());
      todo.addAll(info.interfaces());
    }
    return false;
  }

  private ClassInfo lookup(ClassLoader loader, ClassInfo self, String name) {
    return self != null && self.name().equals(name) ? self : find(loader, name);
  }
}
