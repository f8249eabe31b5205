package kioku.persist.heap;

/**
 * The 40 size classes of small replicas (the thesis's allocator): 8..128 bytes by 8, then
 * 144..256 by 16, 288..512 by 32, 576..1024 by 64. A 4 KiB segment holds slots of one class;
 * anything larger than 1024 bytes takes whole segments.
 */
final class SizeClasses {
  private SizeClasses() {}

  static final int SEGMENT = 4096;
  static final int COUNT = 40;
  static final int MAX_SMALL = 1024;

  private static final int[] SIZE = new int[COUNT + 1];

  static {
    int c = 1;
    for (int s = 8; s <= 128; s += 8) SIZE[c++] = s;
    for (int s = 144; s <= 256; s += 16) SIZE[c++] = s;
    for (int s = 288; s <= 512; s += 32) SIZE[c++] = s;
    for (int s = 576; s <= 1024; s += 64) SIZE[c++] = s;
    if (c != COUNT + 1) throw new AssertionError("size classes: " + (c - 1));
  }

  /** The class (1..40) for a size in bytes (a multiple of 8, at most {@link #MAX_SMALL}). */
  static int classOf(long bytes) {
    if (bytes <= 128) return (int) Math.max(1, bytes / 8);
    if (bytes <= 256) return 16 + (int) ((bytes - 128 + 15) / 16);
    if (bytes <= 512) return 24 + (int) ((bytes - 256 + 31) / 32);
    return 32 + (int) ((bytes - 512 + 63) / 64);
  }

  static int size(int sizeClass) {
    return SIZE[sizeClass];
  }

  static int slotsPerSegment(int sizeClass) {
    return SEGMENT / SIZE[sizeClass];
  }
}
