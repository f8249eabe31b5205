package kioku.persist.agent;

import java.util.Arrays;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.Type;
import org.objectweb.asm.commons.JSRInlinerAdapter;

/**
 * Rewrites an application class: write barriers in every method, the replica word (field,
 * {@code Persistent} and its accessors) when the superclass does not already provide it, and
 * {@code rootsDeclared} at the end of class initialization when the class declares roots.
 */
final class AppClassVisitor extends ClassVisitor {
  private final RewriteContext ctx;
  private final boolean addWord;
  private final boolean mayAddClinit;
  private final boolean declaresRoots;
  private final FieldInitializers.Found inits;
  private boolean sawClinit;

  AppClassVisitor(ClassVisitor next, RewriteContext ctx, boolean addWord, boolean mayAddClinit,
      FieldInitializers.Found inits) {
    super(Opcodes.ASM9, next);
    this.ctx = ctx;
    this.addWord = addWord;
    this.mayAddClinit = mayAddClinit;
    this.declaresRoots = ctx.self.declaresRoots();
    this.inits = inits;
  }

  @Override
  public void visit(
      int version, int access, String name, String signature, String superName, String[] ifs) {
    String[] interfaces = ifs == null ? new String[0] : ifs;
    if (addWord && !Arrays.asList(interfaces).contains(Names.PERSISTENT)) {
      interfaces = Arrays.copyOf(interfaces, interfaces.length + 1);
      interfaces[interfaces.length - 1] = Names.PERSISTENT;
    }
    super.visit(version, access, name, signature, superName, interfaces);
  }

  @Override
  public MethodVisitor visitMethod(
      int access, String name, String desc, String signature, String[] exceptions) {
    MethodVisitor mv = super.visitMethod(access, name, desc, signature, exceptions);
    if (mv == null || (access & (Opcodes.ACC_ABSTRACT | Opcodes.ACC_NATIVE)) != 0) return mv;
    boolean clinit = name.equals("<clinit>");
    sawClinit |= clinit;
    MethodVisitor adapter = clinit && declaresRoots
        ? new RootsDeclaredAdapter(mv, access, name, desc, ctx)
        : new BarrierMethodAdapter(mv, access, name, desc, ctx);
    // Class files before Java 7 may use subroutines (jsr/ret), which the stack analysis does
    // not follow: inline them first.
    if ((ctx.self.version() & 0xffff) < Opcodes.V1_7) {
      return new JSRInlinerAdapter(adapter, access, name, desc, signature, exceptions);
    }
    return adapter;
  }

  @Override
  public void visitEnd() {
    if (addWord) addReplicaWord();
    if (declaresRoots && !sawClinit && mayAddClinit) addClinit();
    // Straight to the writer: their stores run on recovered objects that are not persistent yet.
    FieldInitializers.emit(cv, inits);
    super.visitEnd();
  }

  /**
   * {@code private transient synthetic long $kioku$r} and the two public accessors of
   * {@code Persistent}: transient and synthetic so that serialization and reflective
   * frameworks skip it.
   */
  private void addReplicaWord() {
    String owner = ctx.self.name();
    int fieldAccess = Opcodes.ACC_PRIVATE | Opcodes.ACC_TRANSIENT | Opcodes.ACC_SYNTHETIC;
    super.visitField(fieldAccess, Names.WORD, "J", null, null).visitEnd();

    MethodVisitor get =
        super.visitMethod(Opcodes.ACC_PUBLIC | Opcodes.ACC_SYNTHETIC, Names.WORD, "()J", null, null);
    get.visitCode();
    get.visitVarInsn(Opcodes.ALOAD, 0);
    get.visitFieldInsn(Opcodes.GETFIELD, owner, Names.WORD, "J");
    get.visitInsn(Opcodes.LRETURN);
    get.visitMaxs(0, 0);
    get.visitEnd();

    MethodVisitor set =
        super.visitMethod(Opcodes.ACC_PUBLIC | Opcodes.ACC_SYNTHETIC, Names.WORD, "(J)V", null, null);
    set.visitCode();
    set.visitVarInsn(Opcodes.ALOAD, 0);
    set.visitVarInsn(Opcodes.LLOAD, 1);
    set.visitFieldInsn(Opcodes.PUTFIELD, owner, Names.WORD, "J");
    set.visitInsn(Opcodes.RETURN);
    set.visitMaxs(0, 0);
    set.visitEnd();
  }

  /** A {@code <clinit>} that only announces the roots (the class had no static initializer). */
  private void addClinit() {
    MethodVisitor mv = super.visitMethod(Opcodes.ACC_STATIC, "<clinit>", "()V", null, null);
    mv.visitCode();
    mv.visitLdcInsn(Type.getObjectType(ctx.self.name()));
    mv.visitMethodInsn(
        Opcodes.INVOKESTATIC, Names.BARRIER, "rootsDeclared", "(Ljava/lang/Class;)V", false);
    mv.visitInsn(Opcodes.RETURN);
    mv.visitMaxs(0, 0);
    mv.visitEnd();
  }
}
