package kioku.persist.agent;

import org.objectweb.asm.Opcodes;

/**
 * A field as declared in a class file.
 *
 * @param annotatedRoot carries {@code @kioku.persist.DurableRoot} (valid or not)
 */
record FieldInfo(String name, String desc, int access, boolean annotatedRoot) {
  boolean isStatic() {
    return (access & Opcodes.ACC_STATIC) != 0;
  }

  boolean isVolatile() {
    return (access & Opcodes.ACC_VOLATILE) != 0;
  }

  boolean isReference() {
    char c = desc.charAt(0);
    return c == 'L' || c == '[';
  }

  /** A durable root: annotated, static and of a reference type. */
  boolean isRoot() {
    return annotatedRoot && isStatic() && isReference();
  }

  static String key(String name, String desc) {
    return name + ' ' + desc;
  }
}
