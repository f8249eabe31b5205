package kioku.persist.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import kioku.persist.rt.Instrumented;
import kioku.persist.rt.Persistent;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.Label;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;

/** Options, class selection, failure reporting and the test loader's verification. */
class AgentPartsTest {
  private BarrierState barrier;

  @BeforeEach
  void quietBarrier() {
    barrier = BarrierState.install(null, false);
  }

  @AfterEach
  void restoreBarrier() {
    barrier.close();
  }

  @Test
  void optionsIgnoreOtherKeys() {
    InstrumentOptions o = InstrumentOptions.parse(
        "pool=/tmp/p,instrument.exclude=com.foo.;org/bar/,medium=file,instrument.verbose=true");
    assertEquals(List.of("com/foo/", "org/bar/"), o.excluded());
    assertTrue(o.verbose());
    assertEquals(InstrumentOptions.DEFAULT, InstrumentOptions.parse(null));
    assertEquals(InstrumentOptions.DEFAULT, InstrumentOptions.parse("pool=x"));
  }

  @Test
  void applicationClassesAreChosenByNameAndLoader() {
    ClassFilter f = new ClassFilter(List.of("com/excluded/"));
    ClassLoader app = AgentPartsTest.class.getClassLoader();
    assertTrue(f.isApplicationClass(app, "kioku/persisttest/samples/Fields"));
    assertTrue(f.isApplicationClass(app, "kioku/examples/PowerCuts"));
    assertFalse(f.isApplicationClass(app, "kioku/persist/rt/Barrier"));
    assertFalse(f.isApplicationClass(app, "kioku/persist/shaded/asm/ClassReader"));
    assertFalse(f.isApplicationClass(app, "java/util/ArrayList"));
    assertFalse(f.isApplicationClass(app, "com/sun/x/Y"));
    assertFalse(f.isApplicationClass(app, "com/excluded/Z"));
    assertFalse(f.isApplicationClass(null, "org/foo/Bar"));
    assertFalse(f.isApplicationClass(ClassLoader.getPlatformClassLoader(), "org/foo/Bar"));
    assertFalse(f.isApplicationName(null));
  }

  @Test
  void supportedJdkClasses() {
    assertTrue(JdkClasses.isSupported("java/util/HashMap"));
    assertTrue(JdkClasses.isSupported("java/util/HashMap$TreeNode"));
    assertTrue(JdkClasses.isSupported("java/util/ArrayList$SubList$1"));
    assertTrue(JdkClasses.isSupported("java/util/Collections"));
    assertFalse(JdkClasses.isSupported("java/util/Collections$UnmodifiableList"));
    assertFalse(JdkClasses.isSupported("java/util/HashMapX"));
    assertFalse(JdkClasses.isSupported("java/util/HashSet$1"));
    assertFalse(ClassFilter.isSupportedJdkClass(AgentPartsTest.class.getClassLoader(), "java/util/HashMap"));
  }

  @Test
  void excludedClassesAreLeftAlone() throws Exception {
    KiokuTransformer t = new KiokuTransformer(
        InstrumentOptions.parse("instrument.exclude=kioku.persisttest.samples.Ctor"));
    SampleLoader loader = new SampleLoader(
        (l, name, bytes) -> t.transform(null, l, name, null, null, bytes), Reflect.SAMPLES);
    assertTrue(Persistent.class.isAssignableFrom(Reflect.load(loader, "Flow")));
    Class<?> ctor = loader.loadClass(Reflect.SAMPLES + "Ctor");
    assertFalse(Persistent.class.isAssignableFrom(ctor));
  }

  @Test
  void verboseSaysWhatWasInstrumented() {
    KiokuTransformer t = new KiokuTransformer(InstrumentOptions.parse("instrument.verbose=true"));
    String err = stderrOf(() -> t.transform(null, new SampleLoader(null), "kioku/persisttest/samples/Fields",
        null, null, SampleLoader.originalBytes("kioku/persisttest/samples/Fields")));
    List<String> lines = err.lines().toList();
    assertEquals(1, lines.size(), err);
    assertTrue(lines.get(0).startsWith(
        "kioku-persist: instrumented kioku.persisttest.samples.Fields (+replica word): 17 field writes (4 volatile), 1 array stores"),
        lines.get(0));
  }

  @Test
  void retransformingReproducesTheLoadTimeShapeOrOnlyRewritesBodies() {
    KiokuTransformer t = new KiokuTransformer(InstrumentOptions.DEFAULT);
    SampleLoader loader = new SampleLoader(null);
    String name = "kioku/persisttest/samples/LazyRoots";
    byte[] original = SampleLoader.originalBytes(name);
    // Never defined through the transformer (as for classes loaded before agentmain): the
    // retransformation may not add the word or a <clinit>, yet still adds barriers.
    String err = stderrOf(() -> {
      byte[] bodiesOnly = t.transform(null, loader, name, Object.class, null, original);
      ClassInfo info = ClassInfoReader.read(bodiesOnly, false);
      assertNull(info.field("$kioku$r", "J"));
      assertFalse(info.declaresMethod("<clinit>", "()V"));
      assertFalse(info.interfaces().contains("kioku/persist/rt/Persistent"));
      assertTrue(Bytecode.instructions(bodiesOnly, "assignOther")
          .contains("INVOKESTATIC kioku/persist/rt/Barrier.putRoot"));
      // Defined through it: a later retransformation gives the same class again.
      byte[] loaded = t.transform(null, loader, name, null, null, original);
      byte[] again = t.transform(null, loader, name, Object.class, null, original);
      assertTrue(java.util.Arrays.equals(loaded, again));
      assertTrue(ClassInfoReader.read(again, false).declaresMethod("<clinit>", "()V"));
    });
    assertTrue(err.lines().allMatch(l -> l.startsWith("kioku-persist: warning: @DurableRoot")), err);
  }

  /** A method that fits in 64 KiB only without the barriers: ASM cannot write it. */
  static byte[] hugeClass(String internalName) {
    ClassWriter cw = new ClassWriter(ClassWriter.COMPUTE_MAXS);
    cw.visit(Opcodes.V17, Opcodes.ACC_PUBLIC, internalName, null, "java/lang/Object", null);
    cw.visitField(Opcodes.ACC_PUBLIC, "x", "I", null, null).visitEnd();
    MethodVisitor init = cw.visitMethod(Opcodes.ACC_PUBLIC, "<init>", "()V", null, null);
    init.visitCode();
    init.visitVarInsn(Opcodes.ALOAD, 0);
    init.visitMethodInsn(Opcodes.INVOKESPECIAL, "java/lang/Object", "<init>", "()V", false);
    init.visitInsn(Opcodes.RETURN);
    init.visitMaxs(0, 0);
    init.visitEnd();
    MethodVisitor fill = cw.visitMethod(Opcodes.ACC_PUBLIC, "fill", "()I", null, null);
    fill.visitCode();
    for (int i = 0; i < 9000; i++) {
      fill.visitVarInsn(Opcodes.ALOAD, 0);
      fill.visitIntInsn(Opcodes.SIPUSH, i);
      fill.visitFieldInsn(Opcodes.PUTFIELD, internalName, "x", "I");
    }
    fill.visitVarInsn(Opcodes.ALOAD, 0);
    fill.visitFieldInsn(Opcodes.GETFIELD, internalName, "x", "I");
    fill.visitInsn(Opcodes.IRETURN);
    fill.visitMaxs(0, 0);
    fill.visitEnd();
    cw.visitEnd();
    return cw.toByteArray();
  }

  @Test
  void aFailedTransformationIsOneLineAndRecorded() {
    String name = "kioku/persisttest/gen/Huge";
    byte[] bytes = hugeClass(name);
    KiokuTransformer t = new KiokuTransformer(InstrumentOptions.DEFAULT);
    byte[][] out = new byte[1][];
    String err = stderrOf(() -> out[0] = t.transform(null, new SampleLoader(null), name, null, null, bytes));
    assertNull(out[0]);
    List<String> lines = err.lines().toList();
    assertEquals(1, lines.size(), err);
    assertTrue(lines.get(0).startsWith(
        "kioku-persist: cannot instrument kioku.persisttest.gen.Huge: MethodTooLargeException"), err);
    assertTrue(Instrumented.failed().contains(name));
    // It still loads and runs, uninstrumented.
    Class<?> c = new SampleLoader(null).define(name.replace('/', '.'), bytes);
    assertEquals(8999, Reflect.call(Reflect.construct(c), "fill"));
  }

  @Test
  void oldClassFilesWithSubroutinesAreInstrumented() {
    String name = "kioku/persisttest/gen/Old";
    ClassWriter cw = new ClassWriter(ClassWriter.COMPUTE_MAXS);
    cw.visit(Opcodes.V1_4, Opcodes.ACC_PUBLIC, name, null, "java/lang/Object", null);
    MethodVisitor m = cw.visitMethod(Opcodes.ACC_PUBLIC | Opcodes.ACC_STATIC, "f", "([I)I", null, null);
    m.visitCode();
    Label sub = new Label();
    store(m, 0, 7);
    m.visitJumpInsn(Opcodes.JSR, sub); // as javac 1.4 compiled finally blocks
    m.visitVarInsn(Opcodes.ALOAD, 0);
    m.visitInsn(Opcodes.ICONST_0);
    m.visitInsn(Opcodes.IALOAD);
    m.visitInsn(Opcodes.IRETURN);
    m.visitLabel(sub);
    m.visitVarInsn(Opcodes.ASTORE, 1);
    store(m, 1, 9);
    m.visitVarInsn(Opcodes.RET, 1);
    m.visitMaxs(0, 0);
    m.visitEnd();
    cw.visitEnd();
    KiokuTransformer t = new KiokuTransformer(InstrumentOptions.DEFAULT);
    SampleLoader loader = new SampleLoader(null);
    byte[] out = t.transform(null, loader, name, null, null, cw.toByteArray());
    Class<?> old = loader.define(name.replace('/', '.'), out);
    RecordingHooks hooks = new RecordingHooks();
    try (BarrierState s = BarrierState.install(hooks, true)) {
      int[] a = new int[2];
      assertEquals(7, Reflect.callStatic(old, "f", (Object) a));
      assertEquals(9, a[1]);
      assertEquals(2, hooks.calls("storePrimitive").size());
    }
  }

  private static void store(MethodVisitor m, int index, int value) {
    m.visitVarInsn(Opcodes.ALOAD, 0);
    m.visitIntInsn(Opcodes.BIPUSH, index);
    m.visitIntInsn(Opcodes.BIPUSH, value);
    m.visitInsn(Opcodes.IASTORE);
  }

  @Test
  void theTestLoaderVerifies() {
    ClassWriter cw = new ClassWriter(ClassWriter.COMPUTE_MAXS);
    cw.visit(Opcodes.V17, Opcodes.ACC_PUBLIC, "kioku/persisttest/gen/Bad", null, "java/lang/Object", null);
    MethodVisitor m = cw.visitMethod(Opcodes.ACC_PUBLIC | Opcodes.ACC_STATIC, "m", "()I", null, null);
    m.visitCode();
    m.visitInsn(Opcodes.ACONST_NULL);
    m.visitInsn(Opcodes.IRETURN); // a reference returned as an int
    m.visitMaxs(0, 0);
    m.visitEnd();
    cw.visitEnd();
    Class<?> bad = new SampleLoader(null).define("kioku.persisttest.gen.Bad", cw.toByteArray());
    assertThrows(VerifyError.class, bad::getDeclaredMethods); // links, so verifies
  }

  static String stderrOf(Runnable r) {
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    PrintStream saved = System.err;
    System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
    try {
      r.run();
    } finally {
      System.setErr(saved);
    }
    return err.toString(StandardCharsets.UTF_8);
  }
}
