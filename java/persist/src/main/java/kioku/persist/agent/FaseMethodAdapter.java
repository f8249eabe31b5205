package kioku.persist.agent;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.objectweb.asm.Handle;
import org.objectweb.asm.Label;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.Type;

/**
 * An instance method of a supported JDK collection class as one failure-atomic section:
 * {@code tok = Barrier.faseEnter(this, this instanceof Persistent)} at entry, {@code Barrier.faseExit(tok)} before every
 * return, and a catch-all handler that calls faseExit and rethrows. The handler protects the
 * body in segments that exclude each return's own faseExit, so no path exits twice. It is the
 * last entry of the exception table, so the method's own handlers still see their exceptions
 * first.
 *
 * <p>Frames are not recomputed (that would need the class hierarchy, i.e. class loading): the
 * token is a new local assigned before any original code, so it is an int in every original
 * frame, and the handler's frame declares only the token.
 */
final class FaseMethodAdapter extends BarrierMethodAdapter {
  private final boolean emitFrames;
  private int token = -1;
  private Label segmentStart;
  private boolean segmentHasCode;
  private final List<Label[]> segments = new ArrayList<>();

  FaseMethodAdapter(MethodVisitor mv, int access, String name, String desc, RewriteContext ctx) {
    super(mv, access, name, desc, ctx);
    this.emitFrames = (ctx.self.version() & 0xffff) >= Opcodes.V1_6;
  }

  @Override
  public void visitCode() {
    super.visitCode();
    token = newLocal(Type.INT_TYPE);
    mv.visitVarInsn(ALOAD, 0);
    // The receiver's type test, false in a JDK class (see BarrierMethodAdapter.isPersistentType:
    // an instrumented receiver there has an identity hash once it is persistent).
    if (ctx.jdk) {
      mv.visitInsn(ICONST_0);
    } else {
      mv.visitVarInsn(ALOAD, 0);
      mv.visitTypeInsn(INSTANCEOF, Names.PERSISTENT);
    }
    mv.visitMethodInsn(INVOKESTATIC, Names.BARRIER, "faseEnter", "(Ljava/lang/Object;Z)I", false);
    mv.visitVarInsn(ISTORE, token);
    startSegment();
    ctx.faseMethods++;
  }

  private void startSegment() {
    segmentStart = new Label();
    mv.visitLabel(segmentStart);
    segmentHasCode = false;
  }

  /** Ends the protected segment here; empty ones are dropped (the JVM rejects them). */
  private void endSegment() {
    if (segmentHasCode) {
      Label end = new Label();
      mv.visitLabel(end);
      segments.add(new Label[] {segmentStart, end});
    }
    segmentHasCode = false;
  }

  private void exit() {
    mv.visitVarInsn(ILOAD, token);
    mv.visitMethodInsn(INVOKESTATIC, Names.BARRIER, "faseExit", "(I)V", false);
  }

  @Override
  public void visitInsn(int opcode) {
    if (opcode >= IRETURN && opcode <= RETURN) {
      endSegment();
      exit();
      super.visitInsn(opcode);
      startSegment();
      return;
    }
    segmentHasCode = true;
    super.visitInsn(opcode);
  }

  @Override
  public void visitMaxs(int maxStack, int maxLocals) {
    endSegment();
    if (!segments.isEmpty()) {
      Label handler = new Label();
      for (Label[] s : segments) mv.visitTryCatchBlock(s[0], s[1], handler, null);
      mv.visitLabel(handler);
      if (emitFrames) {
        Object[] locals = new Object[token + 1];
        Arrays.fill(locals, Opcodes.TOP);
        locals[token] = Opcodes.INTEGER;
        mv.visitFrame(F_NEW, locals.length, locals, 1, new Object[] {Names.THROWABLE});
      }
      exit();
      mv.visitInsn(ATHROW);
    }
    super.visitMaxs(maxStack, maxLocals);
  }

  // Every other instruction puts code into the current segment.

  @Override
  public void visitIntInsn(int opcode, int operand) {
    segmentHasCode = true;
    super.visitIntInsn(opcode, operand);
  }

  @Override
  public void visitVarInsn(int opcode, int var) {
    segmentHasCode = true;
    super.visitVarInsn(opcode, var);
  }

  @Override
  public void visitTypeInsn(int opcode, String type) {
    segmentHasCode = true;
    super.visitTypeInsn(opcode, type);
  }

  @Override
  public void visitFieldInsn(int opcode, String owner, String name, String desc) {
    segmentHasCode = true;
    super.visitFieldInsn(opcode, owner, name, desc);
  }

  @Override
  public void visitMethodInsn(int opcode, String owner, String name, String desc, boolean itf) {
    segmentHasCode = true;
    super.visitMethodInsn(opcode, owner, name, desc, itf);
  }

  @Override
  public void visitInvokeDynamicInsn(String name, String desc, Handle bsm, Object... args) {
    segmentHasCode = true;
    super.visitInvokeDynamicInsn(name, desc, bsm, args);
  }

  @Override
  public void visitJumpInsn(int opcode, Label label) {
    segmentHasCode = true;
    super.visitJumpInsn(opcode, label);
  }

  @Override
  public void visitLdcInsn(Object value) {
    segmentHasCode = true;
    super.visitLdcInsn(value);
  }

  @Override
  public void visitIincInsn(int var, int increment) {
    segmentHasCode = true;
    super.visitIincInsn(var, increment);
  }

  @Override
  public void visitTableSwitchInsn(int min, int max, Label dflt, Label... labels) {
    segmentHasCode = true;
    super.visitTableSwitchInsn(min, max, dflt, labels);
  }

  @Override
  public void visitLookupSwitchInsn(Label dflt, int[] keys, Label[] labels) {
    segmentHasCode = true;
    super.visitLookupSwitchInsn(dflt, keys, labels);
  }

  @Override
  public void visitMultiANewArrayInsn(String desc, int dims) {
    segmentHasCode = true;
    super.visitMultiANewArrayInsn(desc, dims);
  }
}
