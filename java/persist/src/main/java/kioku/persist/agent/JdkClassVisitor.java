package kioku.persist.agent;

import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;

/**
 * Rewrites a supported JDK class on retransformation, which may change method bodies only (no
 * new fields, methods or interfaces): write barriers everywhere, and each writing instance
 * method made one failure-atomic section (except in the lock-free classes of
 * java.util.concurrent, see JdkClasses#sectionsPerMethod).
 */
final class JdkClassVisitor extends ClassVisitor {
  private final RewriteContext ctx;

  JdkClassVisitor(ClassVisitor next, RewriteContext ctx) {
    super(Opcodes.ASM9, next);
    this.ctx = ctx;
  }

  @Override
  public MethodVisitor visitMethod(
      int access, String name, String desc, String signature, String[] exceptions) {
    MethodVisitor mv = super.visitMethod(access, name, desc, signature, exceptions);
    if (mv == null || (access & (Opcodes.ACC_ABSTRACT | Opcodes.ACC_NATIVE)) != 0) return mv;
    boolean instance = (access & Opcodes.ACC_STATIC) == 0;
    if (instance && !name.equals("<init>") && ctx.self.writes(name, desc)
        && JdkClasses.sectionsPerMethod(ctx.self.name())) {
      return new FaseMethodAdapter(mv, access, name, desc, ctx);
    }
    return new BarrierMethodAdapter(mv, access, name, desc, ctx);
  }
}
