package kioku.persist.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.ObjectStreamClass;
import java.io.Serializable;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import kioku.persist.rt.Instrumented;
import kioku.persist.rt.Persistent;
import kioku.persisttest.samples.Pojo;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The application-class rewrite on a large real library (Jackson, a test dependency): every
 * class is instrumented and verified, and it still serializes beans as before.
 */
class RealLibraryTest {
  private static final String JACKSON = "com.fasterxml.jackson.";

  private BarrierState barrier;

  /** Instrumented code runs with barriers active and recording, as under a real runtime. */
  @BeforeEach
  void recordBarriers() {
    barrier = BarrierState.install(new RecordingHooks(), true);
  }

  @AfterEach
  void restoreBarrier() {
    barrier.close();
  }

  private static List<String> classesOf(Class<?> member) throws Exception {
    Path jar = Path.of(member.getProtectionDomain().getCodeSource().getLocation().toURI());
    List<String> names = new ArrayList<>();
    try (JarFile f = new JarFile(jar.toFile())) {
      for (Enumeration<JarEntry> e = f.entries(); e.hasMoreElements(); ) {
        String n = e.nextElement().getName();
        if (n.endsWith(".class") && !n.startsWith("META-INF/") && !n.endsWith("module-info.class")) {
          names.add(n.substring(0, n.length() - 6).replace('/', '.'));
        }
      }
    }
    return names;
  }

  @Test
  void everyJacksonClassIsInstrumentedAndVerifies() throws Exception {
    SampleLoader loader = SampleLoader.instrumented(JACKSON, Reflect.SAMPLES);
    int linked = 0;
    List<String> errors = new ArrayList<>();
    for (Class<?> member : List.of(ObjectMapper.class, com.fasterxml.jackson.core.JsonParser.class)) {
      for (String name : classesOf(member)) {
        try {
          Class<?> c = loader.loadClass(name);
          c.getDeclaredMethods(); // links the class: the verifier runs
          linked++;
        } catch (NoClassDefFoundError e) {
          // an optional dependency of Jackson that is not on the test class path
        } catch (LinkageError e) {
          errors.add(name + ": " + e);
        }
      }
    }
    assertEquals(List.of(), errors);
    assertTrue(linked > 800, "linked " + linked);
    assertTrue(Instrumented.failed().stream().noneMatch(n -> n.startsWith("com/fasterxml/")),
        Instrumented.failed().toString());
  }

  @Test
  void beansSerializeAsWithoutTheAgent() throws Exception {
    String expected = new ObjectMapper().writeValueAsString(Pojo.sample());
    SampleLoader loader = SampleLoader.instrumented(JACKSON, Reflect.SAMPLES);
    Class<?> mapperClass = loader.loadClass(ObjectMapper.class.getName());
    Object mapper = mapperClass.getConstructor().newInstance();
    Class<?> pojo = Reflect.load(loader, "Pojo");
    Object sample = Reflect.callStatic(pojo, "sample");
    assertTrue(sample instanceof Persistent);
    assertTrue(mapper instanceof Persistent);
    ((Persistent) sample).$kioku$r(1);
    String json = (String) Reflect.call(mapper, "writeValueAsString", sample);
    assertEquals(expected, json);
    Object back = mapperClass.getMethod("readValue", String.class, Class.class).invoke(mapper, json, pojo);
    assertEquals(expected, Reflect.call(mapper, "writeValueAsString", back));
  }

  @Test
  void javaSerializationKeepsTheSerialVersionUid() throws Exception {
    long original = ObjectStreamClass.lookup(Pojo.class).getSerialVersionUID();
    Class<?> pojo = Reflect.load(SampleLoader.instrumented(), "Pojo");
    assertEquals(original, ObjectStreamClass.lookup(pojo).getSerialVersionUID());

    Object sample = Reflect.callStatic(pojo, "sample");
    ((Persistent) sample).$kioku$r(77);
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject((Serializable) sample);
    }
    Object back;
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray())) {
      @Override
      protected Class<?> resolveClass(ObjectStreamClass desc) throws java.io.IOException, ClassNotFoundException {
        return Class.forName(desc.getName(), false, pojo.getClassLoader());
      }
    }) {
      back = in.readObject();
    }
    assertEquals(0, ((Persistent) back).$kioku$r(), "the word is transient");
    assertEquals("child", Reflect.call(((java.util.Map<?, ?>) Reflect.get(back, "children")).get("c"), "getName"));
  }
}
