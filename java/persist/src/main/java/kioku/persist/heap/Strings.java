package kioku.persist.heap;

import java.nio.charset.StandardCharsets;

/** java.lang.String's own bytes and coder, read without copying (replicas store them as is). */
final class Strings {
  private Strings() {}

  private static final long VALUE;
  private static final long CODER;

  static {
    try {
      VALUE = Unsafes.U.objectFieldOffset(String.class.getDeclaredField("value"));
      CODER = Unsafes.U.objectFieldOffset(String.class.getDeclaredField("coder"));
    } catch (NoSuchFieldException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  static byte[] bytes(String s) {
    return (byte[]) Unsafes.U.getObject(s, VALUE);
  }

  static int byteLength(String s) {
    return bytes(s).length;
  }

  /** 0 Latin-1, 1 UTF-16 (little-endian on x86-64). */
  static byte coder(String s) {
    return Unsafes.U.getByte(s, CODER);
  }

  /** Rebuilds a string from replica bytes, whatever this JVM's compact-strings setting. */
  static String of(byte[] bytes, byte coder) {
    return new String(bytes, coder == 0 ? StandardCharsets.ISO_8859_1 : StandardCharsets.UTF_16LE);
  }
}
