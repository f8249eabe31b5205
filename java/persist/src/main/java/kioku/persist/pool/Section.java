package kioku.persist.pool;

/**
 * One named, page-aligned extent of a pool's data area.
 *
 * @param name 1 to 32 bytes of UTF-8, unique in the pool
 * @param offset file offset of the extent (a multiple of the page size)
 * @param length bytes of the extent (a multiple of the page size)
 * @param flags owner-defined bits (an unsigned 32-bit value on media)
 */
public record Section(String name, long offset, long length, int flags) {
  /** One past the last byte. */
  public long end() {
    return offset + length;
  }
}
