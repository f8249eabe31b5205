package kioku.persist.agent;

import java.util.ArrayList;
import java.util.List;
import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;

/** A compact listing of a method's instructions, for asserting where calls were inserted. */
final class Bytecode {
  private Bytecode() {}

  /** Instructions of the first method of that name: field and method instructions spelled out. */
  static List<String> instructions(byte[] classFile, String methodName) {
    List<String> out = new ArrayList<>();
    boolean[] found = {false};
    new ClassReader(classFile).accept(new ClassVisitor(Opcodes.ASM9) {
      @Override
      public MethodVisitor visitMethod(int a, String name, String d, String s, String[] e) {
        if (found[0] || !name.equals(methodName)) return null;
        found[0] = true;
        return new MethodVisitor(Opcodes.ASM9) {
          @Override
          public void visitFieldInsn(int op, String owner, String n, String desc) {
            out.add(name(op) + " " + owner + "." + n);
          }

          @Override
          public void visitMethodInsn(int op, String owner, String n, String desc, boolean i) {
            out.add(name(op) + " " + owner + "." + n);
          }

          @Override
          public void visitInsn(int op) {
            out.add("op" + op);
          }

          @Override
          public void visitVarInsn(int op, int var) {
            out.add("var" + op + " " + var);
          }
        };
      }
    }, 0);
    return out;
  }

  static int indexOf(List<String> instructions, String prefix) {
    for (int i = 0; i < instructions.size(); i++) {
      if (instructions.get(i).startsWith(prefix)) return i;
    }
    return -1;
  }

  private static String name(int op) {
    return switch (op) {
      case Opcodes.GETFIELD -> "GETFIELD";
      case Opcodes.PUTFIELD -> "PUTFIELD";
      case Opcodes.GETSTATIC -> "GETSTATIC";
      case Opcodes.PUTSTATIC -> "PUTSTATIC";
      case Opcodes.INVOKEVIRTUAL -> "INVOKEVIRTUAL";
      case Opcodes.INVOKESPECIAL -> "INVOKESPECIAL";
      case Opcodes.INVOKESTATIC -> "INVOKESTATIC";
      case Opcodes.INVOKEINTERFACE -> "INVOKEINTERFACE";
      default -> "op" + op;
    };
  }
}
