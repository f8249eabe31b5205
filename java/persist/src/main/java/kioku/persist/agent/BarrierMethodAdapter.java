package kioku.persist.agent;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.objectweb.asm.Handle;
import org.objectweb.asm.Label;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.Type;
import org.objectweb.asm.commons.AnalyzerAdapter;
import org.objectweb.asm.commons.LocalVariablesSorter;

/**
 * The write barriers of one method: after each putfield, array store, durable-root putstatic,
 * arraycopy and super.clone(), a call into {@code kioku.persist.rt.Barrier}.
 *
 * <p>A putfield whose object is the uninitialized {@code this} of a constructor (javac writes
 * this$0 and captured values before calling super()) is left alone: that reference may not be
 * passed to a method. An {@link AnalyzerAdapter} after this visitor tells the stack's types at
 * each instruction, from the class file's own stack map frames.
 *
 * <p>A putfield into a constructor's own {@code this} before {@code this} can have escaped is
 * left alone too: an object that nothing but the constructing frame references is reachable
 * from no persistent object, so it has no replica and the barrier would answer "not
 * persistent" (see {@link ThisEscape}). Most constructors are such stores only (collection
 * nodes and entries, iterators, small value objects), and without the calls the JIT keeps
 * their allocation as cheap as without the agent (it can also scalar-replace them).
 *
 * <p>Scratch locals hold a value only between a store and the loads right after it, in
 * straight-line code, so the verifier tracks their exact types there; stack map frames (kept
 * from the original, not recomputed) declare them TOP.
 */
class BarrierMethodAdapter extends LocalVariablesSorter implements Opcodes {
  private static final Type OBJECT_TYPE = Type.getObjectType(Names.OBJECT);

  /** Scratch locals, one per role, reused across the method. */
  private enum Scratch {
    TARGET(OBJECT_TYPE),
    INDEX(Type.INT_TYPE),
    INT(Type.INT_TYPE),
    LONG(Type.LONG_TYPE),
    FLOAT(Type.FLOAT_TYPE),
    DOUBLE(Type.DOUBLE_TYPE),
    REFERENCE(OBJECT_TYPE),
    /** The value a reference store replaces (the runtime puts it back if it refuses). */
    OLD(OBJECT_TYPE);

    final Type type;

    Scratch(Type type) {
      this.type = type;
    }
  }

  protected final RewriteContext ctx;
  /** The types on the operand stack before the instruction being visited (null if unknown). */
  private final AnalyzerAdapter analyzer;
  private final int[] scratch = new int[Scratch.values().length];
  private final List<Integer> scratchSlots = new ArrayList<>();
  /** Where a constructor's {@code this} is while it has not escaped; null elsewhere. */
  private final ThisEscape fresh;

  BarrierMethodAdapter(MethodVisitor mv, int access, String name, String desc, RewriteContext ctx) {
    this(new AnalyzerAdapter(ctx.self.name(), access, name, desc, mv), access, name, desc, ctx);
  }

  private BarrierMethodAdapter(
      AnalyzerAdapter analyzer, int access, String name, String desc, RewriteContext ctx) {
    super(Opcodes.ASM9, access, desc, analyzer);
    this.analyzer = analyzer;
    this.ctx = ctx;
    Arrays.fill(scratch, -1);
    // Stack map frames are what end the straight-line start the analysis covers (every jump
    // target has one), and only class files from Java 7 on must have them.
    this.fresh = name.equals("<init>") && (ctx.self.version() & 0xffff) >= Opcodes.V1_7
        ? new ThisEscape(analyzer) : null;
  }

  // ---- where a constructor's this is (see ThisEscape); every original instruction passes here

  @Override
  public void visitVarInsn(int opcode, int var) {
    if (fresh != null) fresh.varInsn(opcode, var);
    super.visitVarInsn(opcode, var);
  }

  @Override
  public void visitTypeInsn(int opcode, String type) {
    if (fresh != null) fresh.typeInsn(opcode);
    super.visitTypeInsn(opcode, type);
  }

  @Override
  public void visitInvokeDynamicInsn(String name, String desc, Handle bsm, Object... args) {
    if (fresh != null) fresh.consumes(Type.getArgumentsAndReturnSizes(desc) >> 2, -1);
    super.visitInvokeDynamicInsn(name, desc, bsm, args);
  }

  @Override
  public void visitJumpInsn(int opcode, Label label) {
    if (fresh != null) fresh.end();
    super.visitJumpInsn(opcode, label);
  }

  @Override
  public void visitTableSwitchInsn(int min, int max, Label dflt, Label... labels) {
    if (fresh != null) fresh.end();
    super.visitTableSwitchInsn(min, max, dflt, labels);
  }

  @Override
  public void visitLookupSwitchInsn(Label dflt, int[] keys, Label[] labels) {
    if (fresh != null) fresh.end();
    super.visitLookupSwitchInsn(dflt, keys, labels);
  }

  @Override
  public void visitFrame(int type, int numLocal, Object[] local, int numStack, Object[] stack) {
    if (fresh != null) fresh.end(); // a jump target or a handler: reached from anywhere
    super.visitFrame(type, numLocal, local, numStack, stack);
  }

  /**
   * Whether the stack entry {@code depth} entries below the top is a constructor's
   * uninitialized {@code this}. Without frames (class files before Java 6) the types are
   * unknown after the first jump: then false, and javac of that age wrote this$0 at the very
   * start, where they are still known.
   */
  private boolean isUninitializedThis(int depth) {
    List<Object> stack = analyzer.stack;
    if (stack == null) return false;
    int i = stack.size() - 1 - depth;
    return i >= 0 && stack.get(i) == Opcodes.UNINITIALIZED_THIS;
  }

  // ---- putfield / putstatic

  @Override
  public void visitFieldInsn(int opcode, String owner, String name, String desc) {
    if (fresh != null && fresh.fieldInsn(opcode, Type.getType(desc).getSize())) {
      super.visitFieldInsn(opcode, owner, name, desc); // into this, which has not escaped
    } else if (opcode == PUTFIELD && !isUninitializedThis(Type.getType(desc).getSize())) {
      putField(owner, name, desc);
    } else if (opcode == PUTSTATIC) {
      putStatic(owner, name, desc);
    } else {
      super.visitFieldInsn(opcode, owner, name, desc);
    }
  }

  /**
   * store value; store obj; [pre | old = obj.field]; load obj; load value; putfield; load obj;
   * load value; [load old]; call.
   */
  private void putField(String owner, String name, String desc) {
    Type type = Type.getType(desc);
    RewriteContext.FieldWrite w = ctx.fieldWrite(owner, name, desc);
    int value = scratch(valueRole(type));
    int target = scratch(Scratch.TARGET);
    store(type, value);
    store(OBJECT_TYPE, target);
    String suffix = suffix(type);
    boolean ref = suffix.equals("L") && !w.isVolatile();
    String callDesc = "(Ljava/lang/Object;" + barrierArg(type) + (ref ? "Ljava/lang/Object;" : "") + "IZ)V";
    int old = -1;
    if (ref) {
      old = scratch(Scratch.OLD);
      load(OBJECT_TYPE, target);
      super.visitFieldInsn(GETFIELD, owner, name, desc);
      store(OBJECT_TYPE, old);
    }
    if (w.isVolatile()) {
      ctx.volatileWrites++;
      load(OBJECT_TYPE, target);
      loadNormalized(type, value);
      push(w.id());
      isPersistentType(target);
      invokeBarrier("preVolatile" + suffix, callDesc);
    }
    load(OBJECT_TYPE, target);
    load(type, value);
    super.visitFieldInsn(PUTFIELD, owner, name, desc);
    load(OBJECT_TYPE, target);
    if (w.isVolatile()) {
      push(w.id());
      isPersistentType(target);
      invokeBarrier("postVolatile", "(Ljava/lang/Object;IZ)V");
    } else {
      loadNormalized(type, value);
      if (ref) load(OBJECT_TYPE, old);
      push(w.id());
      isPersistentType(target);
      invokeBarrier("put" + suffix, callDesc);
    }
    ctx.fieldWrites++;
  }

  /** dup; getstatic; swap; putstatic; push rootId; Barrier.putRoot(value, old, rootId). */
  private void putStatic(String owner, String name, String desc) {
    int root = ctx.rootId(owner, name, desc);
    if (root == 0) {
      super.visitFieldInsn(PUTSTATIC, owner, name, desc);
      return;
    }
    super.visitInsn(DUP);
    super.visitFieldInsn(GETSTATIC, owner, name, desc);
    super.visitInsn(SWAP);
    super.visitFieldInsn(PUTSTATIC, owner, name, desc);
    push(root);
    invokeBarrier("putRoot", "(Ljava/lang/Object;Ljava/lang/Object;I)V");
    ctx.rootStores++;
  }

  // ---- array stores

  @Override
  public void visitInsn(int opcode) {
    if (fresh != null) fresh.insn(opcode);
    Type element = opcode >= IASTORE && opcode <= SASTORE ? storedElement(opcode) : null;
    if (element == null) {
      super.visitInsn(opcode);
      return;
    }
    int value = scratch(valueRole(element));
    int index = scratch(Scratch.INDEX);
    int array = scratch(Scratch.TARGET);
    store(element, value);
    store(Type.INT_TYPE, index);
    store(OBJECT_TYPE, array);
    int old = -1;
    if (opcode == AASTORE) {
      // The element it replaces (aaload fails exactly where aastore would, before it).
      old = scratch(Scratch.OLD);
      load(OBJECT_TYPE, array);
      load(Type.INT_TYPE, index);
      super.visitInsn(AALOAD);
      store(OBJECT_TYPE, old);
    }
    load(OBJECT_TYPE, array);
    load(Type.INT_TYPE, index);
    load(element, value);
    super.visitInsn(opcode);
    // The array's verified type is exact here (it was just on the stack), so it passes as
    // char[], Object[]... without a checkcast; bastore's byte[]-or-boolean[] goes as Object.
    load(OBJECT_TYPE, array);
    load(Type.INT_TYPE, index);
    loadNormalized(element, value);
    if (old >= 0) load(OBJECT_TYPE, old);
    invokeBarrier("store" + suffix(element), storeDesc(opcode, element));
    ctx.arrayStores++;
  }

  /** The element type an xastore writes (BASTORE: byte, which also serves boolean[]). */
  private static Type storedElement(int opcode) {
    return switch (opcode) {
      case IASTORE -> Type.INT_TYPE;
      case LASTORE -> Type.LONG_TYPE;
      case FASTORE -> Type.FLOAT_TYPE;
      case DASTORE -> Type.DOUBLE_TYPE;
      case AASTORE -> OBJECT_TYPE;
      case BASTORE -> Type.BYTE_TYPE;
      case CASTORE -> Type.CHAR_TYPE;
      case SASTORE -> Type.SHORT_TYPE;
      default -> null;
    };
  }

  private static String storeDesc(int opcode, Type element) {
    return switch (opcode) {
      case BASTORE -> "(Ljava/lang/Object;II)V";
      case AASTORE -> "([Ljava/lang/Object;ILjava/lang/Object;Ljava/lang/Object;)V";
      default -> "([" + element.getDescriptor() + "I" + element.getDescriptor() + ")V";
    };
  }

  /**
   * Pushes {@code target instanceof Persistent} for the Barrier call that follows. The test is
   * the one Barrier would make, but here each store site has its own instruction, so the JIT
   * sees the site's own types: almost every site writes one class, and with the call inlined the
   * test becomes one class compare that also tells the JIT the object's exact class (so the
   * read of its replica word is a field load), instead of a scan of the class's interfaces and
   * a megamorphic interface call in one method shared by every site. Five bytes per site.
   *
   * <p>In a retransformed JDK class the site pushes {@code false} instead, and the barrier goes
   * by the object's identity hash. Its sites write JDK objects almost always, and for those the
   * test was still the interfaces' scan (a {@code repne scasq} per store in HashMap.putVal's
   * compiled code: a failed interface test is never cached, and a site shared by every map of
   * the JVM sees several classes, so the JIT has no single class to compare with). The rare
   * instrumented object such a site writes (an application subclass of a JDK class) is given
   * an identity hash before it gets a replica word (heap.SideTable#hashIfJdkWritten), so the
   * hash path finds it.
   */
  private void isPersistentType(int target) {
    if (ctx.jdk) {
      super.visitInsn(ICONST_0);
      return;
    }
    load(OBJECT_TYPE, target);
    super.visitTypeInsn(INSTANCEOF, Names.PERSISTENT);
  }

  // ---- arraycopy and clone

  @Override
  public void visitMethodInsn(int opcode, String owner, String name, String desc, boolean itf) {
    if (fresh != null) {
      int args = Type.getArgumentsAndReturnSizes(desc) >> 2; // with one for a receiver
      if (opcode == INVOKESTATIC) args--;
      // Object's constructor, the super() of most classes, does nothing with this.
      boolean objectInit = opcode == INVOKESPECIAL && name.equals("<init>") && owner.equals(Names.OBJECT);
      fresh.consumes(args, objectInit ? args - 1 : -1);
    }
    if (opcode == INVOKESTATIC
        && owner.equals(Names.SYSTEM)
        && name.equals("arraycopy")
        && desc.equals(Names.ARRAYCOPY_DESC)) {
      invokeBarrier("arraycopy", desc); // same arguments; it does the copy, then reports it
      ctx.arraycopies++;
    } else if (opcode == INVOKESPECIAL && isClone(name, desc)) {
      // super.clone(), covariant or not: the copy must not keep the original's replica word.
      super.visitMethodInsn(opcode, owner, name, desc, itf);
      invokeBarrier("cloned", "(Ljava/lang/Object;)Ljava/lang/Object;");
      checkcastTo(Type.getReturnType(desc));
      ctx.clones++;
    } else if (opcode == INVOKEVIRTUAL
        && name.equals(Names.CLONE)
        && desc.equals(Names.OBJECT_CLONE_DESC)
        && ctx.cloneMayCopyWord(owner)) {
      // this.clone() reaching Object.clone() (or an uninstrumented JDK class's clone()): keep
      // the receiver so that a clone() returning this is left alone.
      super.visitInsn(DUP);
      super.visitMethodInsn(opcode, owner, name, desc, itf);
      invokeBarrier("clonedFrom", "(Ljava/lang/Object;Ljava/lang/Object;)Ljava/lang/Object;");
      ctx.clones++;
    } else if (AtomicWrites.isUnsafeObjectWrite(owner, name, desc)) {
      if (!AtomicWrites.hasUnsafeHelper(name)) {
        throw new IllegalStateException("an Unsafe write the agent cannot intercept: " + name + desc);
      }
      // Same stack: the Unsafe instance becomes the helper's first argument.
      super.visitMethodInsn(INVOKESTATIC, AtomicWrites.ATOMICS, name, AtomicWrites.helperDesc(desc), false);
      ctx.atomicWrites++;
    } else if (opcode == INVOKEVIRTUAL && owner.equals(AtomicWrites.VAR_HANDLE)) {
      AtomicWrites.Target t = AtomicWrites.varHandleTarget(owner, name, desc);
      switch (t) {
        case FIELD, ELEMENT -> varHandleWrite(name, desc, itf, t);
        case UNKNOWN -> throw new IllegalStateException(
            "a VarHandle write the agent cannot intercept: " + name + desc);
        default -> super.visitMethodInsn(opcode, owner, name, desc, itf);
      }
    } else {
      super.visitMethodInsn(opcode, owner, name, desc, itf);
    }
  }

  /**
   * store args; store vh; load vh; load args; invokevirtual; load vh; load coordinates;
   * Atomics.varHandleWrote{Field,Element}. The written field or element is reported after the
   * write, as every barrier does.
   */
  private void varHandleWrite(String name, String desc, boolean itf, AtomicWrites.Target t) {
    Type[] args = Type.getArgumentTypes(desc);
    int[] locals = new int[args.length];
    for (int i = args.length - 1; i >= 0; i--) {
      locals[i] = freshScratch(args[i]);
      store(args[i], locals[i]);
    }
    int vh = freshScratch(OBJECT_TYPE);
    store(OBJECT_TYPE, vh);
    load(OBJECT_TYPE, vh);
    for (int i = 0; i < args.length; i++) load(args[i], locals[i]);
    super.visitMethodInsn(INVOKEVIRTUAL, AtomicWrites.VAR_HANDLE, name, desc, itf);
    load(OBJECT_TYPE, vh);
    load(args[0], locals[0]);
    if (t == AtomicWrites.Target.ELEMENT) {
      load(Type.INT_TYPE, locals[1]);
      super.visitMethodInsn(INVOKESTATIC, AtomicWrites.ATOMICS, "varHandleWroteElement",
          "(Ljava/lang/invoke/VarHandle;Ljava/lang/Object;I)V", false);
    } else {
      super.visitMethodInsn(INVOKESTATIC, AtomicWrites.ATOMICS, "varHandleWroteField",
          "(Ljava/lang/invoke/VarHandle;Ljava/lang/Object;)V", false);
    }
    ctx.atomicWrites++;
  }

  /** A scratch local of its own (a call may need several of one type). */
  private int freshScratch(Type type) {
    int slot = newLocal(type);
    scratchSlots.add(slot);
    return slot;
  }

  private static boolean isClone(String name, String desc) {
    return name.equals(Names.CLONE) && (desc.startsWith("()L") || desc.startsWith("()["));
  }

  private void checkcastTo(Type type) {
    if (!type.getInternalName().equals(Names.OBJECT)) {
      super.visitTypeInsn(CHECKCAST, type.getInternalName());
    }
  }

  // ---- emission helpers

  protected final void invokeBarrier(String name, String desc) {
    super.visitMethodInsn(INVOKESTATIC, Names.BARRIER, name, desc, false);
  }

  /** An int constant. */
  private void push(int value) {
    if (value >= -1 && value <= 5) {
      super.visitInsn(ICONST_0 + value);
    } else if (value >= Byte.MIN_VALUE && value <= Byte.MAX_VALUE) {
      super.visitIntInsn(BIPUSH, value);
    } else if (value >= Short.MIN_VALUE && value <= Short.MAX_VALUE) {
      super.visitIntInsn(SIPUSH, value);
    } else {
      super.visitLdcInsn(value);
    }
  }

  /**
   * Scratch locals are already in the remapped numbering, so they bypass the sorter's
   * remapping (straight to the next visitor).
   */
  private void store(Type type, int slot) {
    mv.visitVarInsn(type.getOpcode(ISTORE), slot);
  }

  private void load(Type type, int slot) {
    mv.visitVarInsn(type.getOpcode(ILOAD), slot);
  }

  /**
   * Loads a value for a Barrier call narrowed as the JVM narrows it when storing (putfield of
   * a boolean keeps bit 0; char/short/byte truncate), so the reported bits are the stored ones
   * even for bytecode javac would not emit.
   */
  private void loadNormalized(Type type, int slot) {
    load(type, slot);
    switch (type.getSort()) {
      case Type.BOOLEAN -> {
        super.visitInsn(ICONST_1);
        super.visitInsn(IAND);
      }
      case Type.BYTE -> super.visitInsn(I2B);
      case Type.CHAR -> super.visitInsn(I2C);
      case Type.SHORT -> super.visitInsn(I2S);
      default -> {}
    }
  }

  private int scratch(Scratch role) {
    int slot = scratch[role.ordinal()];
    if (slot < 0) {
      slot = newLocal(role.type);
      scratch[role.ordinal()] = slot;
      scratchSlots.add(slot);
    }
    return slot;
  }

  private static Scratch valueRole(Type type) {
    return switch (type.getSort()) {
      case Type.BOOLEAN, Type.BYTE, Type.CHAR, Type.SHORT, Type.INT -> Scratch.INT;
      case Type.LONG -> Scratch.LONG;
      case Type.FLOAT -> Scratch.FLOAT;
      case Type.DOUBLE -> Scratch.DOUBLE;
      default -> Scratch.REFERENCE;
    };
  }

  /** Barrier method suffix: Z B C S I J F D, or L for references and arrays. */
  private static String suffix(Type type) {
    return switch (type.getSort()) {
      case Type.OBJECT, Type.ARRAY -> "L";
      default -> type.getDescriptor();
    };
  }

  private static String barrierArg(Type type) {
    return switch (type.getSort()) {
      case Type.OBJECT, Type.ARRAY -> "Ljava/lang/Object;";
      default -> type.getDescriptor();
    };
  }

  /** Existing frames must not claim a scratch local holds a value: it may not on every path. */
  @Override
  protected void updateNewLocals(Object[] newLocals) {
    for (int slot : scratchSlots) {
      if (slot < newLocals.length) newLocals[slot] = Opcodes.TOP;
    }
  }
}
