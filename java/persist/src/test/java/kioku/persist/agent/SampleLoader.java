package kioku.persist.agent;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.List;

/**
 * Defines the classes under some packages itself, from the test class path's class files
 * passed through a transformation; delegates everything else. Classes it defines are verified
 * (the JVM's default for non-boot loaders), so a bad rewrite fails as a VerifyError.
 */
final class SampleLoader extends ClassLoader {
  /** A transformation of one class; null keeps the original bytes. */
  interface Transform {
    byte[] apply(ClassLoader loader, String internalName, byte[] bytes);
  }

  static {
    registerAsParallelCapable();
  }

  private final List<String> prefixes;
  private final Transform transform;

  SampleLoader(Transform transform, String... packagePrefixes) {
    super("samples", SampleLoader.class.getClassLoader());
    this.transform = transform;
    this.prefixes = List.of(packagePrefixes);
  }

  /** The instrumentation of the agent: its transformer, as the JVM would call it. */
  static SampleLoader instrumented(String... packagePrefixes) {
    KiokuTransformer t = new KiokuTransformer(InstrumentOptions.DEFAULT);
    return new SampleLoader(
        (loader, name, bytes) -> t.transform(null, loader, name, null, null, bytes),
        packagePrefixes);
  }

  static SampleLoader instrumented() {
    return instrumented("kioku.persisttest.samples.");
  }

  @Override
  protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
    if (prefixes.stream().noneMatch(name::startsWith)) return super.loadClass(name, resolve);
    synchronized (getClassLoadingLock(name)) {
      Class<?> c = findLoadedClass(name);
      if (c == null) {
        String internal = name.replace('.', '/');
        byte[] bytes = originalBytes(internal);
        if (bytes == null) throw new ClassNotFoundException(name);
        byte[] out = transform.apply(this, internal, bytes);
        if (out != null) bytes = out;
        c = defineClass(name, bytes, 0, bytes.length);
      }
      if (resolve) resolveClass(c);
      return c;
    }
  }

  static byte[] originalBytes(String internalName) {
    try (InputStream in =
        SampleLoader.class.getClassLoader().getResourceAsStream(internalName + ".class")) {
      return in == null ? null : in.readAllBytes();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Defines a class from bytes as they are (for classes made up by a test). */
  Class<?> define(String name, byte[] bytes) {
    return defineClass(name, bytes, 0, bytes.length);
  }
}
