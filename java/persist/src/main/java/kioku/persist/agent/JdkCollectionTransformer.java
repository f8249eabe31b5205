package kioku.persist.agent;

import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassWriter;

/**
 * Instruments one supported JDK class (boot loader) from its class-file bytes, within what
 * retransformation allows: method bodies only. Frames are kept from the input, plus the one
 * frame of each failure-atomic section's handler, so no class is loaded to compute them.
 */
final class JdkCollectionTransformer {
  private final ClassInfoSource source;
  private final ClassFilter filter;
  private final boolean verbose;

  JdkCollectionTransformer(ClassInfoSource source, ClassFilter filter, boolean verbose) {
    this.source = source;
    this.filter = filter;
    this.verbose = verbose;
  }

  byte[] transform(byte[] bytes) {
    ClassReader reader = new ClassReader(bytes);
    ClassInfo self = ClassInfoReader.read(reader, true);
    RewriteContext ctx = new RewriteContext(null, self, source, filter, true);
    ClassWriter writer = new ClassWriter(reader, ClassWriter.COMPUTE_MAXS);
    reader.accept(new JdkClassVisitor(writer, ctx), ClassReader.EXPAND_FRAMES);
    byte[] out = writer.toByteArray();
    if (verbose) Log.line("instrumented " + Names.dotted(self.name()) + ": " + ctx.summary());
    return out;
  }
}
