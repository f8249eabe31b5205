package kioku.persist.agent;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.tree.AbstractInsnNode;
import org.objectweb.asm.tree.ClassNode;
import org.objectweb.asm.tree.FieldInsnNode;
import org.objectweb.asm.tree.IntInsnNode;
import org.objectweb.asm.tree.InvokeDynamicInsnNode;
import org.objectweb.asm.tree.LdcInsnNode;
import org.objectweb.asm.tree.MethodInsnNode;
import org.objectweb.asm.tree.MethodNode;
import org.objectweb.asm.tree.MultiANewArrayInsnNode;
import org.objectweb.asm.tree.TypeInsnNode;
import org.objectweb.asm.tree.VarInsnNode;
import org.objectweb.asm.tree.analysis.Analyzer;
import org.objectweb.asm.tree.analysis.AnalyzerException;
import org.objectweb.asm.tree.analysis.BasicInterpreter;
import org.objectweb.asm.tree.analysis.BasicValue;
import org.objectweb.asm.tree.analysis.Frame;

/**
 * The field initializers of an application class, so that recovery can give a field added
 * since a pool was written the value a constructor would (the runtime side is
 * kioku.persist.heap.FieldInitializers).
 *
 * <p>javac puts field initializers (and instance initializer blocks) into every constructor
 * that calls super(), right after that call. From each such constructor this takes the leading
 * statements of the form {@code this.f = <expression>} whose expression uses only {@code this}
 * and constants — no arguments or locals, no jumps, no static stores — and keeps those that
 * every super-calling constructor has, identically. Each becomes a synthetic method
 * {@code $kioku$init$f()}. Fields that constructors set otherwise are listed by a synthetic
 * static {@code $kioku$unreplayable()}, so that recovery can warn that they stay default.
 */
final class FieldInitializers {
  static final String PREFIX = "$kioku$init$";
  static final String UNREPLAYABLE = "$kioku$unreplayable";

  /** What one class's constructors say. */
  record Found(Map<String, List<AbstractInsnNode>> segments, Set<String> unreplayable) {
    static final Found NONE = new Found(Map.of(), Set.of());
  }

  private FieldInitializers() {}

  static Found of(ClassNode c) {
    Map<String, List<AbstractInsnNode>> common = null;
    Map<String, String> commonKeys = null;
    Set<String> unreplayable = new LinkedHashSet<>();
    for (MethodNode m : c.methods) {
      if (!m.name.equals("<init>") || m.instructions.size() == 0) continue;
      Frame<BasicValue>[] frames;
      try {
        frames = new Analyzer<>(new BasicInterpreter()).analyze(c.name, m);
      } catch (AnalyzerException | RuntimeException e) {
        return Found.NONE; // (old class files with subroutines, ...) nothing replayed
      }
      AbstractInsnNode[] insns = m.instructions.toArray();
      int superCall = superCall(c, insns);
      if (superCall == -1) continue; // this(...) delegates: the other constructor does it
      if (superCall == -2) return Found.NONE;
      Map<String, List<AbstractInsnNode>> segments = new LinkedHashMap<>();
      Map<String, String> keys = new LinkedHashMap<>();
      int i = superCall + 1;
      while (true) {
        i = nextReal(insns, i);
        if (i < 0 || !isThis(insns[i]) || stack(frames, i) != 0) break;
        int end = statementEnd(c, insns, frames, i);
        if (end < 0) break;
        String field = ((FieldInsnNode) insns[end]).name;
        List<AbstractInsnNode> seg = new ArrayList<>();
        StringBuilder key = new StringBuilder();
        for (int k = i; k <= end; k++) {
          if (insns[k].getOpcode() < 0) continue;
          seg.add(insns[k]);
          key.append(describe(insns[k])).append(';');
        }
        if (!segments.containsKey(field)) {
          segments.put(field, seg);
          keys.put(field, key.toString());
        }
        i = end + 1;
      }
      // Any other store to a field of this in the constructor: not replayable.
      for (AbstractInsnNode n : insns) {
        if (n instanceof FieldInsnNode f && f.getOpcode() == Opcodes.PUTFIELD && f.owner.equals(c.name)
            && !segments.containsKey(f.name)) {
          unreplayable.add(f.name);
        }
      }
      if (common == null) {
        common = segments;
        commonKeys = keys;
      } else {
        for (String f : new ArrayList<>(common.keySet())) {
          if (!keys.containsKey(f) || !keys.get(f).equals(commonKeys.get(f))) {
            common.remove(f);
            unreplayable.add(f);
          }
        }
        for (String f : segments.keySet()) if (!common.containsKey(f)) unreplayable.add(f);
      }
    }
    if (common == null) return new Found(Map.of(), unreplayable);
    unreplayable.removeAll(common.keySet());
    return new Found(common, unreplayable);
  }

  /** Index of the super(...) call; -1 if the constructor calls this(...); -2 if unknown. */
  private static int superCall(ClassNode c, AbstractInsnNode[] insns) {
    int pendingNew = 0;
    for (int i = 0; i < insns.length; i++) {
      AbstractInsnNode n = insns[i];
      if (n.getOpcode() == Opcodes.NEW) pendingNew++;
      if (n instanceof MethodInsnNode mi && mi.getOpcode() == Opcodes.INVOKESPECIAL && mi.name.equals("<init>")) {
        if (pendingNew > 0) {
          pendingNew--;
          continue;
        }
        return mi.owner.equals(c.name) ? -1 : i;
      }
    }
    return -2;
  }

  private static int nextReal(AbstractInsnNode[] insns, int i) {
    while (i < insns.length && insns[i].getOpcode() < 0) i++;
    return i < insns.length ? i : -1;
  }

  private static boolean isThis(AbstractInsnNode n) {
    return n instanceof VarInsnNode v && v.getOpcode() == Opcodes.ALOAD && v.var == 0;
  }

  private static int stack(Frame<BasicValue>[] frames, int i) {
    Frame<BasicValue> f = frames[i];
    return f == null ? -1 : f.getStackSize();
  }

  /**
   * The PUTFIELD to a field of {@code this} ending the statement that starts at {@code start}
   * (an aload_0 on an empty stack), or -1 if the statement is not a replayable initializer.
   */
  private static int statementEnd(ClassNode c, AbstractInsnNode[] insns, Frame<BasicValue>[] frames, int start) {
    for (int k = start + 1; k < insns.length; k++) {
      AbstractInsnNode n = insns[k];
      int op = n.getOpcode();
      if (op < 0) continue;
      if (stack(frames, k) == 0) return -1; // another statement began: not one store
      if (n instanceof FieldInsnNode f && op == Opcodes.PUTFIELD) {
        // The statement's own store: the stack holds just (this, value) before it.
        if (!f.owner.equals(c.name)) return -1;
        int next = nextReal(insns, k + 1);
        return next >= 0 && stack(frames, next) == 0 ? k : -1;
      }
      switch (n.getType()) {
        case AbstractInsnNode.JUMP_INSN, AbstractInsnNode.TABLESWITCH_INSN,
            AbstractInsnNode.LOOKUPSWITCH_INSN, AbstractInsnNode.IINC_INSN -> {
          return -1;
        }
        case AbstractInsnNode.VAR_INSN -> {
          if (!isThis(n)) return -1; // an argument or a local
        }
        default -> {
          // fine
        }
      }
      if (op == Opcodes.PUTSTATIC || op == Opcodes.ATHROW || op == Opcodes.MONITORENTER
          || op == Opcodes.MONITOREXIT || (op >= Opcodes.IRETURN && op <= Opcodes.RETURN)) {
        return -1;
      }
    }
    return -1;
  }

  private static String describe(AbstractInsnNode n) {
    StringBuilder b = new StringBuilder().append(n.getOpcode());
    if (n instanceof FieldInsnNode f) b.append(' ').append(f.owner).append('.').append(f.name).append(f.desc);
    else if (n instanceof MethodInsnNode m) b.append(' ').append(m.owner).append('.').append(m.name).append(m.desc);
    else if (n instanceof TypeInsnNode t) b.append(' ').append(t.desc);
    else if (n instanceof LdcInsnNode l) b.append(' ').append(l.cst.getClass().getSimpleName()).append(l.cst);
    else if (n instanceof IntInsnNode in) b.append(' ').append(in.operand);
    else if (n instanceof VarInsnNode v) b.append(' ').append(v.var);
    else if (n instanceof InvokeDynamicInsnNode d) b.append(' ').append(d.name).append(d.desc).append(d.bsm).append(java.util.Arrays.toString(d.bsmArgs));
    else if (n instanceof MultiANewArrayInsnNode ma) b.append(' ').append(ma.desc).append(ma.dims);
    return b.toString();
  }

  /** Adds the synthetic methods to the class being written. */
  static void emit(ClassVisitor cv, Found found) {
    for (Map.Entry<String, List<AbstractInsnNode>> e : found.segments().entrySet()) {
      MethodVisitor mv = cv.visitMethod(
          Opcodes.ACC_PRIVATE | Opcodes.ACC_SYNTHETIC, PREFIX + e.getKey(), "()V", null, null);
      mv.visitCode();
      MethodNode body = new MethodNode();
      for (AbstractInsnNode n : e.getValue()) body.instructions.add(n.clone(Map.of()));
      body.instructions.accept(mv);
      mv.visitInsn(Opcodes.RETURN);
      mv.visitMaxs(0, 0);
      mv.visitEnd();
    }
    if (!found.unreplayable().isEmpty()) {
      MethodVisitor mv = cv.visitMethod(
          Opcodes.ACC_PRIVATE | Opcodes.ACC_STATIC | Opcodes.ACC_SYNTHETIC, UNREPLAYABLE,
          "()Ljava/lang/String;", null, null);
      mv.visitCode();
      mv.visitLdcInsn(String.join(",", found.unreplayable()));
      mv.visitInsn(Opcodes.ARETURN);
      mv.visitMaxs(0, 0);
      mv.visitEnd();
    }
  }
}
