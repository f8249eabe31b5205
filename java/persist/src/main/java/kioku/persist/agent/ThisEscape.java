package kioku.persist.agent;

import java.util.ArrayList;
import java.util.List;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.commons.AnalyzerAdapter;

/**
 * Whether a constructor's {@code this} may have escaped yet, over the straight-line code at
 * the start of the constructor: until then a putfield into it needs no barrier.
 *
 * <p>Why that is sound: an object becomes persistent only by being reachable from a persistent
 * object (a store of a reference to it, or a make_persistent of something that reaches it). A
 * fresh object that only the constructing frame references is reachable from nothing, so it has
 * no replica, and a barrier after a store into it would find none; nothing can give it one
 * before a reference to it leaves the frame (another thread cannot find it either).
 *
 * <p>What counts as escaping, conservatively: any instruction other than a getfield or putfield
 * of this (as the object, not the value), or Object's constructor, that may consume a
 * reference to this from the operand stack (a call with it among its arguments, a store of it
 * into a field, an array, a static or a local, a type test or cast, a stack shuffle near it
 * other than a dup of it, a monitor, a return), and a store into local 0. The analysis stops,
 * as if this had escaped, at the first jump, switch or stack map frame (every jump target and
 * handler has one: code after it may run after an escape further on). A super() other than
 * Object's may leak this, so it ends the analysis too.
 *
 * <p>The operand stack is the {@link AnalyzerAdapter}'s, before each instruction; a reference
 * to this is tracked by its index there (long and double take two entries).
 */
final class ThisEscape implements Opcodes {
  private final AnalyzerAdapter analyzer;
  /** Indices in the operand stack of the references to this loaded so far; null once escaped. */
  private List<Integer> at = new ArrayList<>(2);

  ThisEscape(AnalyzerAdapter analyzer) {
    this.analyzer = analyzer;
  }

  /** From here on, this is treated as escaped. */
  void end() {
    at = null;
  }

  /**
   * The operand stack's size before the instruction being visited; -1 (and the analysis
   * ended) if unknown, in unreachable code: only after a jump, which ended it already.
   */
  private int depth() {
    List<Object> stack = analyzer.stack;
    if (stack == null) end();
    return stack == null ? -1 : stack.size();
  }

  /** Whether a reference to this is at index {@code from} of the operand stack or above. */
  private boolean anyFrom(int from) {
    for (int i : at) if (i >= from) return true;
    return false;
  }

  void varInsn(int opcode, int var) {
    int d = at == null ? -1 : depth();
    if (at == null) return;
    if (opcode == ALOAD && var == 0) {
      at.add(d);
    } else if (opcode == ASTORE && (var == 0 || anyFrom(d - 1)) || opcode == RET) {
      end();
    }
  }

  void typeInsn(int opcode) {
    int d = at == null ? -1 : depth();
    if (at == null) return;
    if ((opcode == CHECKCAST || opcode == INSTANCEOF) && anyFrom(d - 1)) end();
  }

  /** Instructions without operands: those that may take a reference are checked. */
  void insn(int opcode) {
    int d = at == null ? -1 : depth();
    if (at == null) return;
    if (opcode >= IRETURN && opcode <= RETURN || opcode == ATHROW) {
      end();
      return;
    }
    if (opcode == DUP && at.contains(d - 1)) { // this.f += x: the copy is this too
      at.add(d);
      return;
    }
    boolean takesReference = opcode >= IALOAD && opcode <= SALOAD
        || opcode >= IASTORE && opcode <= SASTORE
        || opcode >= POP && opcode <= SWAP
        || opcode == ARRAYLENGTH || opcode == MONITORENTER || opcode == MONITOREXIT;
    // The deepest any of them reaches: four entries (dup2_x2, lastore's array below a long).
    if (takesReference && anyFrom(d - 4)) end();
  }

  /**
   * A call that takes the top {@code slots} entries; {@code receiverSlot}, if not -1, is where
   * (counted from the deepest of them) a reference to this may be without escaping.
   */
  void consumes(int slots, int receiverSlot) {
    int d = at == null ? -1 : depth();
    if (at == null) return;
    int base = d - slots;
    for (int i = at.size() - 1; i >= 0; i--) {
      int idx = at.get(i);
      if (idx < base) continue;
      if (receiverSlot >= 0 && idx == base + receiverSlot) {
        at.remove(i);
      } else {
        end();
        return;
      }
    }
  }

  /**
   * A field instruction; {@code size} is the field's size in stack entries. Returns true for a
   * putfield into this before it has escaped (it needs no barrier).
   */
  boolean fieldInsn(int opcode, int size) {
    int d = at == null ? -1 : depth();
    if (at == null) return false;
    switch (opcode) {
      case GETFIELD -> at.remove((Integer) (d - 1)); // this as the object: nothing leaves
      case PUTSTATIC -> {
        if (anyFrom(d - size)) end();
      }
      case PUTFIELD -> {
        if (anyFrom(d - size)) { // this as the value
          end();
          return false;
        }
        return at.remove((Integer) (d - 1 - size));
      }
      default -> {}
    }
    return false;
  }
}
