package kioku.persist.heap;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** Primitive array elements to and from their little-endian bytes (the replica's form). */
final class ArrayBytes {
  private ArrayBytes() {}

  /** Elements [from, from+n) of a primitive array as bytes. */
  static byte[] toBytes(Object array, char code, int from, int n) {
    ByteBuffer b = ByteBuffer.allocate(n * Layout.sizeOf(code)).order(ByteOrder.LITTLE_ENDIAN);
    switch (code) {
      case 'Z' -> {
        boolean[] a = (boolean[]) array;
        for (int i = 0; i < n; i++) b.put(a[from + i] ? (byte) 1 : 0);
      }
      case 'B' -> b.put((byte[]) array, from, n);
      case 'C' -> b.asCharBuffer().put((char[]) array, from, n);
      case 'S' -> b.asShortBuffer().put((short[]) array, from, n);
      case 'I' -> b.asIntBuffer().put((int[]) array, from, n);
      case 'F' -> b.asFloatBuffer().put((float[]) array, from, n);
      case 'J' -> b.asLongBuffer().put((long[]) array, from, n);
      case 'D' -> b.asDoubleBuffer().put((double[]) array, from, n);
      default -> throw new IllegalArgumentException("not a primitive array: " + code);
    }
    return b.array();
  }

  /** Stores bytes into elements [from, from+n) of a primitive array. */
  static void fromBytes(byte[] bytes, Object array, char code, int from, int n) {
    ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
    switch (code) {
      case 'Z' -> {
        boolean[] a = (boolean[]) array;
        for (int i = 0; i < n; i++) a[from + i] = b.get(i) != 0;
      }
      case 'B' -> b.get((byte[]) array, from, n);
      case 'C' -> b.asCharBuffer().get((char[]) array, from, n);
      case 'S' -> b.asShortBuffer().get((short[]) array, from, n);
      case 'I' -> b.asIntBuffer().get((int[]) array, from, n);
      case 'F' -> b.asFloatBuffer().get((float[]) array, from, n);
      case 'J' -> b.asLongBuffer().get((long[]) array, from, n);
      case 'D' -> b.asDoubleBuffer().get((double[]) array, from, n);
      default -> throw new IllegalArgumentException("not a primitive array: " + code);
    }
  }
}
