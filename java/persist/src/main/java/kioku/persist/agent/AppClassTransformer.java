package kioku.persist.agent;

import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.commons.SerialVersionUIDAdder;
import org.objectweb.asm.tree.ClassNode;

/**
 * Instruments one application class from its class-file bytes. Frames are kept from the
 * input (only max stack/locals are recomputed), so nothing here needs the class hierarchy
 * beyond what {@link ClassInfoSource} reads from class files.
 */
final class AppClassTransformer {
  private final ClassInfoSource source;
  private final ClassFilter filter;
  private final boolean verbose;

  AppClassTransformer(ClassInfoSource source, ClassFilter filter, boolean verbose) {
    this.source = source;
    this.filter = filter;
    this.verbose = verbose;
  }

  /** The instrumented bytes, or null to leave the class as it is (interfaces, modules). */
  byte[] transform(ClassLoader loader, byte[] bytes) {
    return transform(loader, bytes, true);
  }

  /**
   * With {@code mayAddMembers} false (retransforming a class that was loaded before the
   * agent, whose shape cannot change any more), only method bodies are rewritten: no replica
   * word, no added {@code <clinit>}, no serialVersionUID.
   */
  byte[] transform(ClassLoader loader, byte[] bytes, boolean mayAddMembers) {
    ClassReader reader = new ClassReader(bytes);
    ClassInfo self = ClassInfoReader.read(reader, false);
    warnAboutInvalidRoots(self);
    if (self.isInterface() || self.isModule()) return null; // includes annotations
    // The word is inherited from an instrumented superclass; decided by name only.
    boolean addWord = mayAddMembers
        && !filter.isApplicationName(self.superName())
        && self.field(Names.WORD, "J") == null;
    RewriteContext ctx = new RewriteContext(loader, self, source, filter, false);
    ClassWriter writer = new ClassWriter(reader, ClassWriter.COMPUTE_MAXS);
    FieldInitializers.Found inits = FieldInitializers.Found.NONE;
    if (mayAddMembers && !self.isEnum() && !self.isRecord() && hasInstanceFields(self)) {
      ClassNode node = new ClassNode();
      reader.accept(node, ClassReader.SKIP_FRAMES);
      inits = FieldInitializers.of(node);
    }
    ClassVisitor cv = new AppClassVisitor(writer, ctx, addWord, mayAddMembers, inits);
    if (addWord && keepsSerialVersionUid(loader, self)) {
      // The new interface and public methods would change the default serialVersionUID and
      // break deserializing data written without the agent: pin the original one.
      cv = new SerialVersionUIDAdder(Opcodes.ASM9, cv) {};
    }
    reader.accept(cv, ClassReader.EXPAND_FRAMES);
    byte[] out = writer.toByteArray();
    if (verbose) {
      Log.line("instrumented " + Names.dotted(self.name()) + (addWord ? " (+replica word)" : "")
          + ": " + ctx.summary());
    }
    return out;
  }

  private static boolean hasInstanceFields(ClassInfo self) {
    for (FieldInfo f : self.fields().values()) if (!f.isStatic()) return true;
    return false;
  }

  private boolean keepsSerialVersionUid(ClassLoader loader, ClassInfo self) {
    return !self.isEnum()
        && !self.isRecord()
        && self.field("serialVersionUID", "J") == null
        && source.isSubtypeOf(loader, self, self.name(), "java/io/Serializable", true);
  }

  private static void warnAboutInvalidRoots(ClassInfo self) {
    for (FieldInfo f : self.fields().values()) {
      if (!f.annotatedRoot()) continue;
      String where = "warning: @DurableRoot on " + Names.dotted(self.name()) + "." + f.name();
      if (!f.isRoot()) {
        Log.line(where + " is ignored: a durable root must be a static field of a reference type");
      } else if (self.isInterface()) {
        Log.line(where + " is ignored: an interface's constants cannot be durable roots");
      }
    }
  }
}
