package kioku.persist.agent;

import static kioku.persist.agent.Reflect.call;
import static kioku.persist.agent.Reflect.callStatic;
import static kioku.persist.agent.Reflect.load;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import kioku.persist.rt.Barrier;
import kioku.persisttest.samples.Flow;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The JDK-class rewrite (barriers plus failure-atomic sections), applied to test classes
 * shaped like collections, since java.util classes cannot be defined by a test loader.
 */
class FaseTest {
  private RecordingHooks hooks;
  private BarrierState barrier;
  private SampleLoader loader;

  @BeforeEach
  void setUp() {
    hooks = new RecordingHooks();
    barrier = BarrierState.install(hooks, true);
    JdkCollectionTransformer jdk =
        new JdkCollectionTransformer(new ClassInfoSource(), new ClassFilter(List.of()), false);
    loader = new SampleLoader((l, name, bytes) -> jdk.transform(bytes), Reflect.SAMPLES);
  }

  @AfterEach
  void tearDown() {
    barrier.close();
  }

  /** Every exit matches the innermost open entry, and all are closed; returns the entries. */
  private List<RecordingHooks.Call> assertBalanced() {
    Deque<Integer> open = new ArrayDeque<>();
    for (RecordingHooks.Call c : hooks.calls()) {
      if (c.kind().equals("faseEnter")) open.push(c.id());
      if (c.kind().equals("faseExit")) {
        assertTrue(!open.isEmpty(), "exit without entry: " + hooks.calls());
        assertEquals(open.pop(), c.id(), "exits out of order: " + hooks.calls());
      }
    }
    assertTrue(open.isEmpty(), "entries left open: " + hooks.calls());
    return hooks.calls("faseEnter");
  }

  private Object collection(Object... xs) {
    Object c = callStatic(load(loader, "FakeCollection"), "of", (Object) xs);
    hooks.clear();
    return c;
  }

  @Test
  void aWritingMethodIsOneSection() {
    Object c = collection();
    call(c, "add", "a");
    List<RecordingHooks.Call> calls = hooks.calls();
    assertEquals("faseEnter", calls.get(0).kind());
    assertSame(c, calls.get(0).target());
    assertEquals("faseExit", calls.get(calls.size() - 1).kind());
    assertEquals(calls.get(0).id(), calls.get(calls.size() - 1).id());
    assertEquals(1, hooks.calls("storeReference").size());
    assertEquals(2, hooks.calls("putPrimitive").size()); // size, modCount
    assertEquals(1, assertBalanced().size());

    hooks.clear();
    call(c, "add", "b");
    call(c, "add", "c"); // grows: a nested section for grow(), with an arraycopy
    assertEquals(1, hooks.calls("copied").size());
    assertEquals(3, assertBalanced().size());
  }

  @Test
  void methodsWithoutWritesAreNotWrapped() {
    // Reads (even through calls) pay nothing: only methods that store are sections.
    Object c = collection(1, 2);
    assertEquals(2, call(c, "size"));
    assertEquals(2, call(c, "get", 1));
    assertTrue(hooks.calls().isEmpty());
  }

  @Test
  void anExceptionLeavesTheSectionOnce() {
    Object c = collection(1);
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> call(c, "failAfterWrite"));
    assertEquals("boom", e.getMessage());
    List<RecordingHooks.Call> calls = hooks.calls();
    assertEquals(List.of("faseEnter", "putPrimitive", "faseExit"),
        calls.stream().map(RecordingHooks.Call::kind).toList());
    assertBalanced();

    hooks.clear();
    assertThrows(IndexOutOfBoundsException.class, () -> call(c, "get", 7));
    assertEquals(0, assertBalanced().size(), "get only reads: no section");
  }

  @Test
  void anExceptionCaughtInsideStaysInside() {
    Object c = collection(1);
    assertEquals(-1, call(c, "catchInside"));
    assertEquals(1, assertBalanced().size()); // catchInside (the failing get only reads)
    assertEquals(1, hooks.calls("putPrimitive").size());
  }

  @Test
  void returnsOfEveryKindExitTheSection() {
    Object c = collection(1, 2, 3);
    assertEquals(1L, call(c, "find", 2));
    assertEquals(-1L, call(c, "find", 9));
    assertEquals(2.0, call(c, "average"));
    assertEquals(3, call(c, "get", 2));
    call(c, "clear");
    assertEquals(0, call(c, "size"));
    assertTrue(Double.isNaN((Double) call(c, "average")));
    assertBalanced();
  }

  @Test
  void controlFlowRunsAsBefore() {
    long expected = Flow.run(60);
    assertEquals(expected, callStatic(load(loader, "Flow"), "run", 60));
    assertBalanced();
    Barrier.active = false;
    assertEquals(expected, callStatic(load(loader, "Flow"), "run", 60));
  }

  @Test
  void theSupportedJdkClassesTransform() {
    JdkCollectionTransformer jdk =
        new JdkCollectionTransformer(new ClassInfoSource(), new ClassFilter(List.of()), false);
    int transformed = 0;
    for (String name : JdkClasses.TOP_LEVEL) {
      byte[] bytes = ClassInfoSource.classFile(null, name);
      if (bytes == null) continue;
      byte[] out = jdk.transform(bytes);
      transformed++;
      if (name.equals("java/util/ArrayList")) {
        List<String> add = Bytecode.instructions(out, "add");
        // aload this; aload this; instanceof Persistent (not listed); faseEnter
        assertEquals("INVOKESTATIC kioku/persist/rt/Barrier.faseEnter", add.get(2));
        assertTrue(add.contains("INVOKESTATIC kioku/persist/rt/Barrier.storeL"));
      }
      for (String nested : ClassInfoReader.read(bytes, false).nestMembers()) {
        jdk.transform(ClassInfoSource.classFile(null, nested));
        transformed++;
      }
    }
    assertTrue(transformed > 80, "transformed " + transformed);
  }
}
