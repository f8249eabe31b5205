package kioku.persist.pool;

import java.lang.reflect.Field;
import java.nio.Buffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import sun.misc.Unsafe;

/**
 * The native address of a direct buffer (its {@code Buffer.address} field, read by offset:
 * java.nio does not export it), for {@link Medium#address}. 0 where it cannot be had, or on a
 * big-endian machine (the pool's words are little-endian): callers then go through the buffer.
 */
final class NativeAddresses {
  private NativeAddresses() {}

  private static final Unsafe U;
  private static final long ADDRESS;

  static {
    Unsafe u = null;
    long at = -1;
    try {
      Field f = Unsafe.class.getDeclaredField("theUnsafe");
      f.setAccessible(true);
      u = (Unsafe) f.get(null);
      at = u.objectFieldOffset(Buffer.class.getDeclaredField("address"));
    } catch (ReflectiveOperationException | RuntimeException e) {
      u = null;
    }
    U = u;
    ADDRESS = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN ? at : -1;
  }

  static long of(MappedByteBuffer b) {
    if (U == null || ADDRESS < 0 || !b.isDirect()) return 0;
    return U.getLong(b, ADDRESS);
  }
}
