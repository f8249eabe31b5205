package kioku.persist.agent;

import java.util.List;
import java.util.Map;
import java.util.Set;
import org.objectweb.asm.Opcodes;

/**
 * What the instrumentation needs to know about a class, read from its class file (never by
 * loading it).
 *
 * @param fields by {@link FieldInfo#key}
 * @param methods name + descriptor of every declared method
 * @param writingMethods the methods containing a putfield, an array store or an arraycopy (only
 *     when the code was read): those a failure-atomic section must wrap
 * @param nestMembers the NestMembers attribute (nested classes of a nest host)
 */
record ClassInfo(
    String name,
    String superName,
    List<String> interfaces,
    int access,
    int version,
    Map<String, FieldInfo> fields,
    Set<String> methods,
    Set<String> writingMethods,
    List<String> nestMembers) {

  FieldInfo field(String fieldName, String desc) {
    return fields.get(FieldInfo.key(fieldName, desc));
  }

  boolean declaresMethod(String methodName, String desc) {
    return methods.contains(methodName + desc);
  }

  boolean writes(String methodName, String desc) {
    return writingMethods.contains(methodName + desc);
  }

  boolean isInterface() {
    return (access & Opcodes.ACC_INTERFACE) != 0;
  }

  boolean isModule() {
    return (access & Opcodes.ACC_MODULE) != 0;
  }

  boolean isEnum() {
    return (access & Opcodes.ACC_ENUM) != 0;
  }

  boolean isRecord() {
    return "java/lang/Record".equals(superName);
  }

  /** Whether any field is a valid durable root. */
  boolean declaresRoots() {
    for (FieldInfo f : fields.values()) if (f.isRoot()) return true;
    return false;
  }
}
