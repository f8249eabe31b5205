package kioku.persist.agent;

import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Type;

/**
 * The {@code <clinit>} of a class that declares durable roots: before every return, {@code
 * Barrier.rootsDeclared(ThisClass.class)}, so the runtime can hand the roots their recovered
 * graphs once the class's own initializers have run.
 */
final class RootsDeclaredAdapter extends BarrierMethodAdapter {
  RootsDeclaredAdapter(MethodVisitor mv, int access, String name, String desc, RewriteContext ctx) {
    super(mv, access, name, desc, ctx);
  }

  @Override
  public void visitInsn(int opcode) {
    if (opcode == RETURN) {
      mv.visitLdcInsn(Type.getObjectType(ctx.self.name()));
      mv.visitMethodInsn(INVOKESTATIC, Names.BARRIER, "rootsDeclared", "(Ljava/lang/Class;)V", false);
    }
    super.visitInsn(opcode);
  }
}
