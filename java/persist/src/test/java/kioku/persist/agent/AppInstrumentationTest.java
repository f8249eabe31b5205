package kioku.persist.agent;

import static kioku.persist.agent.Reflect.call;
import static kioku.persist.agent.Reflect.callStatic;
import static kioku.persist.agent.Reflect.construct;
import static kioku.persist.agent.Reflect.load;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.IntSupplier;
import kioku.persist.rt.Barrier;
import kioku.persist.rt.FieldIds;
import kioku.persist.rt.Instrumented;
import kioku.persist.rt.Persistent;
import kioku.persisttest.samples.Flow;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Application-class instrumentation, run in a verifying class loader with recording hooks. */
class AppInstrumentationTest {
  private static final String F = "kioku/persisttest/samples/Fields";

  private RecordingHooks hooks;
  private BarrierState barrier;
  private SampleLoader loader;

  @BeforeEach
  void setUp() {
    hooks = new RecordingHooks();
    barrier = BarrierState.install(hooks, true);
    loader = SampleLoader.instrumented();
  }

  @AfterEach
  void tearDown() {
    barrier.close();
  }

  private static void assertField(int id, String owner, String name, String desc, boolean vol) {
    assertEquals(new FieldIds.FieldRef(owner, name, desc, vol), FieldIds.WRITTEN.get(id));
  }

  private static void assertRoot(int id, String owner, String name, String desc) {
    assertEquals(new FieldIds.FieldRef(owner, name, desc, false), FieldIds.ROOTS.get(id));
  }

  private static Persistent word(Object o) {
    return (Persistent) o;
  }

  @Test
  void primitiveAndReferenceFieldWritesReportIdsAndBits() {
    Object o = construct(load(loader, "Fields"));
    call(o, "writeAll");
    // Field writes of an object whose word is 0 are filtered by Barrier (arrays are not).
    assertEquals(List.of("storePrimitive"),
        hooks.calls().stream().map(RecordingHooks.Call::kind).toList());

    hooks.clear();
    word(o).$kioku$r(1);
    call(o, "writeAll");
    List<RecordingHooks.Call> prim = hooks.calls("putPrimitive");
    String[][] expected = {{"z", "Z"}, {"b", "B"}, {"c", "C"}, {"s", "S"}, {"i", "I"},
        {"j", "J"}, {"f", "F"}, {"d", "D"}};
    long[] bits = {1, 0xff, 0xffff, 0xfffe, 0xfffffffdL, -4L,
        Float.floatToRawIntBits(-1.5f) & 0xffffffffL, Double.doubleToRawLongBits(Math.PI)};
    assertEquals(expected.length, prim.size());
    for (int k = 0; k < expected.length; k++) {
      assertSame(o, prim.get(k).target());
      assertField(prim.get(k).id(), F, expected[k][0], expected[k][1], false);
      assertEquals(bits[k], prim.get(k).bits(), expected[k][0]);
    }
    List<RecordingHooks.Call> refs = hooks.calls("putReference");
    assertEquals(2, refs.size());
    assertField(refs.get(0).id(), F, "ref", "Ljava/lang/Object;", false);
    assertEquals("x", refs.get(0).ref());
    assertField(refs.get(1).id(), F, "ints", "[I", false);
    assertSame(Reflect.get(o, "ints"), refs.get(1).ref());
    // The array initializer's store is reported before the array is assigned.
    List<RecordingHooks.Call> all = hooks.calls();
    assertEquals("storePrimitive", all.get(all.size() - 2).kind());
    assertEquals("putReference", all.get(all.size() - 1).kind());
  }

  @Test
  void volatileWritesAreBracketedAroundTheStore() {
    Object o = construct(load(loader, "Fields"));
    word(o).$kioku$r(1);
    call(o, "writeVolatiles");
    List<RecordingHooks.Call> calls = hooks.calls();
    assertEquals(8, calls.size());
    Object[][] expected = {
      {"vi", "I", 0xfffffff9L, null, 0, -7},
      {"vj", "J", Long.MIN_VALUE, null, 0L, Long.MIN_VALUE},
      {"vz", "Z", 1L, null, false, true},
      {"vref", "Ljava/lang/Object;", 0L, o, null, o},
    };
    for (int k = 0; k < expected.length; k++) {
      RecordingHooks.Call pre = calls.get(2 * k);
      RecordingHooks.Call post = calls.get(2 * k + 1);
      assertEquals("preVolatile", pre.kind());
      assertEquals("postVolatile", post.kind());
      assertField(pre.id(), F, (String) expected[k][0], (String) expected[k][1], true);
      assertEquals(pre.id(), post.id());
      assertEquals(expected[k][2], pre.bits());
      assertSame(expected[k][3], pre.ref());
      assertEquals(expected[k][4], pre.observed(), "pre runs before the DRAM store");
      assertEquals(expected[k][5], post.observed(), "post runs after it");
    }
  }

  @Test
  void fieldsAreNumberedByTheirDeclaringClass() {
    Class<?> fields = load(loader, "Fields");
    Object target = construct(fields);
    Object sub = construct(load(loader, "Fields$Sub"));
    word(target).$kioku$r(1);
    word(sub).$kioku$r(2);
    callStatic(fields, "writeOther", target, sub);
    List<RecordingHooks.Call> calls = hooks.calls("putPrimitive");
    assertEquals(3, calls.size());
    assertField(calls.get(0).id(), F + "$Sub", "extra", "I", false);
    assertField(calls.get(1).id(), F, "i", "I", false); // written as Sub.i, declared in Fields
    assertSame(sub, calls.get(1).target());
    assertEquals(calls.get(1).id(), calls.get(2).id());
    assertSame(target, calls.get(2).target());
  }

  @Test
  void onlyTheTopmostApplicationClassGetsTheReplicaWord() throws Exception {
    Class<?> fields = load(loader, "Fields");
    Class<?> sub = load(loader, "Fields$Sub");
    Field w = fields.getDeclaredField("$kioku$r");
    assertEquals(long.class, w.getType());
    int m = w.getModifiers();
    assertTrue(Modifier.isPrivate(m) && Modifier.isTransient(m) && w.isSynthetic());
    assertTrue(Arrays.asList(fields.getInterfaces()).contains(Persistent.class));
    assertTrue(fields.getDeclaredMethod("$kioku$r").isSynthetic());
    assertTrue(fields.getDeclaredMethod("$kioku$r", long.class).isSynthetic());
    assertFalse(Arrays.stream(sub.getDeclaredFields()).anyMatch(f -> f.getName().equals("$kioku$r")));
    assertFalse(Arrays.stream(sub.getDeclaredMethods()).anyMatch(x -> x.getName().equals("$kioku$r")));
    assertFalse(Arrays.asList(sub.getInterfaces()).contains(Persistent.class));
    Object s = construct(sub);
    word(s).$kioku$r(42);
    assertEquals(42, word(s).$kioku$r());
  }

  @Test
  void constructorWritesAfterSuperAreReported() {
    Class<?> ctor = load(loader, "Ctor");
    Object a = construct(ctor, 5);
    List<RecordingHooks.Call> calls = hooks.calls();
    assertEquals(2, calls.size());
    assertField(calls.get(0).id(), "kioku/persisttest/samples/Ctor", "x", "I", false);
    assertEquals(5, calls.get(0).bits());
    assertSame(a, calls.get(0).target());
    assertEquals("putReference", calls.get(1).kind());
    assertEquals("n5", calls.get(1).ref());

    hooks.clear();
    Object b = construct(ctor); // this(41), then x = 99
    List<Long> xs = hooks.calls("putPrimitive").stream().map(RecordingHooks.Call::bits).toList();
    assertEquals(List.of(41L, 99L), xs);
    assertEquals(99, Reflect.get(b, "x"));

    hooks.clear();
    int[] arr = new int[1];
    Object c = construct(ctor, a, arr, "zz");
    List<RecordingHooks.Call> calls3 = hooks.calls();
    assertEquals(List.of("storePrimitive", "putPrimitive", "putPrimitive", "putReference", "putPrimitive"),
        calls3.stream().map(RecordingHooks.Call::kind).toList());
    assertSame(arr, calls3.get(0).target());
    assertSame(a, calls3.get(1).target()); // other.y = ..., before this() and reported
    assertEquals("y", FieldIds.WRITTEN.get(calls3.get(1).id()).name());
    assertSame(c, calls3.get(4).target()); // in the catch block after this()
    assertEquals(0xffffffffL, calls3.get(4).bits());
  }

  @Test
  void innerClassWritesBeforeSuperAreLeftAlone() throws Exception {
    Class<?> outerClass = load(loader, "Outer");
    Object outer = construct(outerClass);
    Object inner = call(outer, "inner", 5);
    assertEquals(15, Reflect.get(inner, "y"));
    assertSame(outer, Reflect.get(inner, "this$0"));

    // In the rewritten constructor, this$0 is stored with no barrier call after it (this is
    // still uninitialized there), and y neither: this has not escaped yet (see
    // constructorStoresBeforeThisEscapesHaveNoBarrier).
    List<String> init = rewrittenInit("Outer$Inner");
    int this0 = Bytecode.indexOf(init, "PUTFIELD kioku/persisttest/samples/Outer$Inner.this$0");
    int superCall = Bytecode.indexOf(init, "INVOKESPECIAL java/lang/Object.<init>");
    assertTrue(this0 >= 0 && this0 < superCall);
    assertTrue(Bytecode.indexOf(init, "PUTFIELD kioku/persisttest/samples/Outer$Inner.y") > superCall);
    assertFalse(init.stream().anyMatch(s -> s.contains("Barrier")));

    IntSupplier captured = (IntSupplier) call(outer, "captured", 3);
    word(captured).$kioku$r(3);
    assertEquals(6 + 10 + 1, captured.getAsInt());
    List<RecordingHooks.Call> calls = hooks.calls("putPrimitive");
    assertEquals(1, calls.size()); // calls++ (the captured val$local was set before super())
    assertEquals("calls", FieldIds.WRITTEN.get(calls.get(0).id()).name());
  }

  private static List<String> rewrittenInit(String sample) {
    String name = "kioku/persisttest/samples/" + sample;
    byte[] out = new KiokuTransformer(InstrumentOptions.DEFAULT).transform(null,
        SampleLoader.instrumented(), name, null, null, SampleLoader.originalBytes(name));
    return Bytecode.instructions(out, "<init>");
  }

  /** The Barrier calls in a list of instructions, in order. */
  private static List<String> barrierCalls(List<String> instructions) {
    return instructions.stream().filter(s -> s.contains("kioku/persist/rt/Barrier.")).toList();
  }

  /**
   * A constructor's stores into this before this may have left the frame have no barrier (the
   * object cannot be persistent yet); every store after a possible escape, after a jump
   * target, after a super() other than Object's, and into another object keeps its barrier.
   */
  @Test
  void constructorStoresBeforeThisEscapesHaveNoBarrier() {
    String b = "INVOKESTATIC kioku/persist/rt/Barrier.";
    assertEquals(List.of(), barrierCalls(rewrittenInit("Fresh$Plain")));
    assertEquals(List.of(b + "putL"), barrierCalls(rewrittenInit("Fresh$Leaks")));
    assertEquals(List.of(b + "putI"), barrierCalls(rewrittenInit("Fresh$Loop")));
    assertEquals(List.of(b + "putL", b + "putI"), barrierCalls(rewrittenInit("Fresh$SelfRef")));
    assertEquals(List.of(b + "putI"), barrierCalls(rewrittenInit("Fresh$Sub")));
    assertEquals(List.of(b + "putL"), barrierCalls(rewrittenInit("Fresh$ViaOther")));

    // Run: the plain one works, and a store after the escape reaches the runtime when the
    // consumer made the object look persistent.
    Object p = construct(load(loader, "Fresh$Plain"), 4, "x");
    assertEquals(8, Reflect.get(p, "a"));
    assertEquals(List.of(), hooks.calls());
    java.util.function.Consumer<Object> sink = o -> word(o).$kioku$r(9);
    Object l = construct(load(loader, "Fresh$Leaks"), 5, sink);
    List<RecordingHooks.Call> calls = hooks.calls();
    assertEquals(1, calls.size());
    assertEquals("putReference", calls.get(0).kind());
    assertSame(l, calls.get(0).target());
    assertEquals("after", calls.get(0).ref());
    assertEquals(5, Reflect.get(l, "a"));
  }

  /**
   * With writers not fencing and unhashed objects not reported, the runtime sees exactly the
   * stores into objects that may be persistent: an instrumented object whose replica word is
   * set (the site's own type test says it is one), an array with an identity hash.
   */
  @Test
  void onlyStoresIntoObjectsThatMayBePersistentReachTheRuntime() {
    boolean fenced = Barrier.fenced;
    Barrier.reportUnhashed = false;
    Barrier.fenced = false;
    try {
      Object o = construct(load(loader, "Fields"));
      call(o, "writeAll"); // word 0; its new int[] has no identity hash
      assertEquals(List.of(), hooks.calls());

      word(o).$kioku$r(1);
      call(o, "writeAll");
      assertEquals(8, hooks.calls("putPrimitive").size());
      assertEquals(2, hooks.calls("putReference").size());
      assertEquals(List.of(), hooks.calls("storePrimitive"));

      hooks.clear();
      int[] unhashed = new int[2];
      int[] hashed = new int[2];
      System.identityHashCode(hashed);
      Class<?> stores = load(loader, "ArrayStores");
      boolean[] z = new boolean[2];
      byte[] b = new byte[2];
      char[] c = new char[2];
      short[] s = new short[2];
      long[] j = new long[2];
      float[] f = new float[2];
      double[] d = new double[2];
      Object[] l = new String[2];
      Barrier.addSideClass(int[].class); // as the runtime does before an int[] gets a word
      callStatic(stores, "storeAll", z, b, c, s, unhashed, j, f, d, l);
      assertEquals(List.of(), hooks.calls());
      callStatic(stores, "storeAll", z, b, c, s, hashed, j, f, d, l);
      assertEquals(1, hooks.calls().size());
      assertSame(hashed, hooks.calls().get(0).target());
      assertEquals(-3, hashed[1]);
      assertEquals(-3, unhashed[1]);

      // A hashed primitive array whose class does not pass the class filter is not looked at
      // either: the first of these kinds whose bit no other test raised.
      hooks.clear();
      char[] c2 = null;
      short[] s2 = null;
      float[] f2 = null;
      if (!Barrier.passesSideClassFilter(char[].class)) {
        c2 = new char[2];
        System.identityHashCode(c2);
      } else if (!Barrier.passesSideClassFilter(short[].class)) {
        s2 = new short[2];
        System.identityHashCode(s2);
      } else if (!Barrier.passesSideClassFilter(float[].class)) {
        f2 = new float[2];
        System.identityHashCode(f2);
      }
      assertTrue(c2 != null || s2 != null || f2 != null,
          "char[], short[] and float[] all pass the filter (other tests raised their bits)");
      callStatic(stores, "storeAll", z, b, c2 != null ? c2 : c, s2 != null ? s2 : s, unhashed, j,
          f2 != null ? f2 : f, d, l);
      assertEquals(List.of(), hooks.calls());
    } finally {
      Barrier.fenced = fenced;
    }
  }

  @Test
  void arrayStoresOfEveryKind() {
    boolean[] z = new boolean[2];
    byte[] b = new byte[2];
    char[] c = new char[2];
    short[] s = new short[2];
    int[] i = new int[2];
    long[] j = new long[2];
    float[] f = new float[2];
    double[] d = new double[2];
    Object[] l = new String[2];
    callStatic(load(loader, "ArrayStores"), "storeAll", z, b, c, s, i, j, f, d, l);
    assertTrue(z[1]);
    assertEquals(-1, b[1]);
    assertEquals('\uffff', c[1]);
    assertEquals(-3, i[1]);
    assertEquals("v", l[1]);
    List<RecordingHooks.Call> calls = hooks.calls();
    Object[] arrays = {z, b, c, s, i, j, f, d};
    long[] bits = {1, 0xff, 0xffff, 0xfffe, 0xfffffffdL, -4L,
        Float.floatToRawIntBits(-1.5f) & 0xffffffffL, Double.doubleToRawLongBits(Math.E)};
    assertEquals(9, calls.size());
    for (int k = 0; k < arrays.length; k++) {
      assertEquals("storePrimitive", calls.get(k).kind());
      assertSame(arrays[k], calls.get(k).target());
      assertEquals(1, calls.get(k).id());
      assertEquals(bits[k], calls.get(k).bits(), "element " + k);
    }
    assertEquals("storeReference", calls.get(8).kind());
    assertSame(l, calls.get(8).target());
    assertEquals("v", calls.get(8).ref());

    hooks.clear();
    String[][] grid = (String[][]) callStatic(load(loader, "ArrayStores"), "nested");
    List<RecordingHooks.Call> stores = hooks.calls("storeReference");
    assertEquals(4, stores.size()); // "a", "b" into the new row, the row, then "c"
    assertSame(grid, stores.get(2).target());
    assertSame(grid[1], stores.get(2).ref());
    assertSame(grid[0], stores.get(3).target());
    assertEquals("c", stores.get(3).ref());
  }

  @Test
  void arraycopyCopiesAndReports() {
    int[] dst = new int[6];
    Object r = callStatic(load(loader, "ArrayStores"), "copy", new int[] {1, 2, 3, 4, 5}, dst);
    assertSame(dst, r);
    assertArrayEquals(new int[] {0, 0, 2, 3, 4, 0}, dst);
    List<RecordingHooks.Call> calls = hooks.calls();
    assertEquals(1, calls.size());
    assertEquals("copied", calls.get(0).kind());
    assertSame(dst, calls.get(0).target());
    assertEquals(2, calls.get(0).id());
    assertEquals(3, calls.get(0).bits());
  }

  @Test
  void clonesDoNotKeepTheReplicaWord() {
    Object original = construct(load(loader, "Cloning"));
    word(original).$kioku$r(5);
    Object copy = call(original, "clone");
    assertNotSame(original, copy);
    assertEquals(0, word(copy).$kioku$r());
    assertEquals(5, word(original).$kioku$r());
    assertEquals(List.of(copy), hooks.calls("cloned").stream().map(RecordingHooks.Call::target).toList());

    // (Plain) clone() in a class that does not override clone(): reaches Object.clone().
    hooks.clear();
    Object plain = construct(load(loader, "Cloning$Plain"));
    word(plain).$kioku$r(6);
    Object plainCopy = call(plain, "copy");
    assertNotSame(plain, plainCopy);
    assertEquals(0, word(plainCopy).$kioku$r());
    assertEquals(6, word(plain).$kioku$r());

    // The same call site on a subclass whose clone() returns this: not a copy, word kept.
    hooks.clear();
    Object shared = construct(load(loader, "Cloning$Shared"));
    word(shared).$kioku$r(8);
    assertSame(shared, call(shared, "copy"));
    assertEquals(8, word(shared).$kioku$r());
    assertTrue(hooks.calls("cloned").isEmpty());
  }

  @Test
  void durableRootsAreReportedAndDeclaredAtTheEndOfClinit() {
    Class<?> roots = load(loader, "Roots"); // initializes it
    List<RecordingHooks.Call> calls = hooks.calls();
    assertEquals(2, calls.size(), calls.toString());
    assertEquals("putRoot", calls.get(0).kind());
    assertRoot(calls.get(0).id(), "kioku/persisttest/samples/Roots", "list", "Ljava/util/List;");
    assertEquals("rootsDeclared", calls.get(1).kind());
    assertSame(roots, calls.get(1).target());
    List<String> replacement = new ArrayList<>();
    callStatic(roots, "replace", replacement);
    List<RecordingHooks.Call> puts = hooks.calls("putRoot");
    assertEquals(2, puts.size());
    assertEquals(puts.get(0).id(), puts.get(1).id());
    assertSame(replacement, puts.get(1).ref());
  }

  @Test
  void rootsWithoutClinitAndFromAnotherClass() {
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    PrintStream saved = System.err;
    Class<?> lazy;
    System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
    try {
      lazy = load(loader, "LazyRoots");
    } finally {
      System.setErr(saved);
    }
    List<String> lines = err.toString(StandardCharsets.UTF_8).lines().toList();
    assertEquals(2, lines.size(), lines.toString());
    for (String line : lines) {
      assertTrue(line.startsWith("kioku-persist: warning: @DurableRoot on kioku.persisttest.samples.LazyRoots."), line);
    }
    assertTrue(lines.stream().anyMatch(x -> x.contains(".primitive ")));
    assertTrue(lines.stream().anyMatch(x -> x.contains(".instance ")));

    assertEquals(List.of("rootsDeclared"), hooks.calls().stream().map(RecordingHooks.Call::kind).toList());
    assertSame(lazy, hooks.calls().get(0).target());

    hooks.clear();
    callStatic(lazy, "assignOther", "v");
    List<RecordingHooks.Call> puts = hooks.calls("putRoot");
    // Roots's own initializer runs first (putRoot, rootsDeclared), then the two assignments.
    assertEquals(3, puts.size(), hooks.calls().toString());
    assertRoot(puts.get(1).id(), "kioku/persisttest/samples/Roots", "list", "Ljava/util/List;");
    assertEquals(null, puts.get(1).ref());
    assertRoot(puts.get(2).id(), "kioku/persisttest/samples/LazyRoots", "root", "Ljava/lang/Object;");
    assertEquals("v", puts.get(2).ref());
  }

  @Test
  void enumsAndRecordsGetTheWordAndBehaveAsBefore() {
    Class<?> color = load(loader, "Shapes$Color");
    Object[] values = color.getEnumConstants();
    assertTrue(values[0] instanceof Persistent);
    assertTrue(values[1] instanceof Persistent); // GREEN's body is a subclass
    assertEquals("green", values[1].toString());
    assertEquals("RED", values[0].toString());

    Class<?> point = load(loader, "Shapes$Point");
    Object p = construct(point, 1, 2L, "a");
    Object q = construct(point, 1, 2L, "a");
    assertTrue(p instanceof Persistent);
    word(p).$kioku$r(9);
    assertEquals(p, q);
    assertEquals(p.hashCode(), q.hashCode());
    assertEquals("Point[x=1, y=2, label=a]", p.toString());
    assertEquals(3, point.getRecordComponents().length);
  }

  @Test
  void controlFlowRunsAsBefore() {
    long expected = Flow.run(60);
    Class<?> flow = load(loader, "Flow");
    assertEquals(expected, callStatic(flow, "run", 60));
    Barrier.active = false;
    assertEquals(expected, callStatic(flow, "run", 60));
  }

  @Test
  void samplesWereAllInstrumented() {
    for (String s : List.of("Fields", "Ctor", "Outer", "ArrayStores", "Cloning", "Flow")) {
      load(loader, s);
      assertFalse(Instrumented.failed().contains("kioku/persisttest/samples/" + s));
    }
  }
}
