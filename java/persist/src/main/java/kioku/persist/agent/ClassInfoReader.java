package kioku.persist.agent;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.objectweb.asm.AnnotationVisitor;
import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.FieldVisitor;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;

/** Builds a {@link ClassInfo} from class-file bytes (one pass of ASM's reader). */
final class ClassInfoReader extends ClassVisitor {
  private String name;
  private String superName;
  private List<String> interfaces = List.of();
  private int access;
  private int version;
  private final Map<String, FieldInfo> fields = new LinkedHashMap<>();
  private final Set<String> methods = new HashSet<>();
  private final Set<String> writingMethods = new HashSet<>();
  private final List<String> nestMembers = new ArrayList<>();
  private final boolean withCode;

  private ClassInfoReader(boolean withCode) {
    super(Opcodes.ASM9);
    this.withCode = withCode;
  }

  /** With {@code withCode}, also finds the methods that write (see {@link ClassInfo}). */
  static ClassInfo read(ClassReader reader, boolean withCode) {
    ClassInfoReader r = new ClassInfoReader(withCode);
    int flags = ClassReader.SKIP_DEBUG | ClassReader.SKIP_FRAMES;
    reader.accept(r, withCode ? flags : flags | ClassReader.SKIP_CODE);
    return new ClassInfo(
        r.name,
        r.superName,
        r.interfaces,
        r.access,
        r.version,
        Map.copyOf(r.fields),
        Set.copyOf(r.methods),
        Set.copyOf(r.writingMethods),
        List.copyOf(r.nestMembers));
  }

  static ClassInfo read(byte[] bytes, boolean withCode) {
    return read(new ClassReader(bytes), withCode);
  }

  @Override
  public void visit(
      int version, int access, String name, String signature, String superName, String[] ifs) {
    this.version = version;
    this.access = access;
    this.name = name;
    this.superName = superName;
    this.interfaces = ifs == null ? List.of() : List.of(ifs);
  }

  @Override
  public void visitNestMember(String nestMember) {
    nestMembers.add(nestMember);
  }

  @Override
  public FieldVisitor visitField(
      int access, String name, String desc, String signature, Object value) {
    String key = FieldInfo.key(name, desc);
    fields.put(key, new FieldInfo(name, desc, access, false));
    return new FieldVisitor(Opcodes.ASM9) {
      @Override
      public AnnotationVisitor visitAnnotation(String annotation, boolean visible) {
        if (visible && Names.DURABLE_ROOT_DESC.equals(annotation)) {
          fields.put(key, new FieldInfo(name, desc, access, true));
        }
        return null;
      }
    };
  }

  @Override
  public MethodVisitor visitMethod(
      int access, String name, String desc, String signature, String[] exceptions) {
    String key = name + desc;
    methods.add(key);
    if (!withCode) return null;
    return new MethodVisitor(Opcodes.ASM9) {
      private void writes() {
        writingMethods.add(key);
      }

      @Override
      public void visitFieldInsn(int opcode, String owner, String fieldName, String fieldDesc) {
        if (opcode == Opcodes.PUTFIELD) writes();
      }

      @Override
      public void visitInsn(int opcode) {
        if (opcode >= Opcodes.IASTORE && opcode <= Opcodes.SASTORE) writes();
      }

      // Only direct writes count. A method that writes through a helper (HashMap.put through
      // putVal) is covered by the helper's own section; wrapping every method that calls
      // something would make pure reads (get, contains, iteration) pay a lookup each.
      @Override
      public void visitMethodInsn(int op, String owner, String m, String d, boolean itf) {
        if (owner.equals("java/lang/System") && m.equals("arraycopy")) writes();
        if (AtomicWrites.isUnsafeObjectWrite(owner, m, d)) writes();
        AtomicWrites.Target t = AtomicWrites.varHandleTarget(owner, m, d);
        if (t != AtomicWrites.Target.NONE && t != AtomicWrites.Target.STATIC) writes();
      }
    };
  }
}
