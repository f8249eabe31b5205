package kioku.persist.pool;

import java.util.OptionalLong;

/**
 * Everything that can go wrong opening, creating or changing a pool or its medium. The message
 * is one line that names the file and says what to do; {@link #reason()} is for programs. The
 * messages mirror the Rust side's ({@code crates/pool/src/error.rs}, {@code media/mod.rs}).
 *
 * <p>Caller bugs (a bad section name, a duplicate section, too many roots) are
 * {@link IllegalArgumentException}s instead.
 */
public final class PoolException extends java.io.IOException {
  private static final long serialVersionUID = 1L;

  /** What went wrong. */
  public enum Reason {
    /** Bad magic: the file is not a pool. */
    NOT_A_POOL,
    /** A format version this code does not read. */
    UNSUPPORTED_VERSION,
    /** The file is shorter than its header, metadata or live commit. */
    TRUNCATED,
    /** The header checksum does not match. */
    HEADER_CHECKSUM,
    /** A header field (checksum correct) has an impossible value. */
    HEADER_INVALID,
    /** The pool was made on a machine with another page size. */
    PAGE_SIZE_MISMATCH,
    /** No intact commit (or the live index holds neither 0 nor 1). */
    COMMIT_DAMAGED,
    /** The live slot is damaged but the previous commit is intact (needs allowRollback). */
    LIVE_SLOT_DAMAGED,
    /** Another process (or another open in this JVM) holds the pool. */
    BUSY,
    /** {@code create} on an existing path. */
    ALREADY_EXISTS,
    /** No file at the path. */
    NOT_FOUND,
    /** A symbolic link at the path, in a directory other users can write (/tmp, /dev/shm). */
    SYMLINK,
    /** The pool's kind tag is not the one the caller expects. */
    WRONG_KIND,
    /** Medium shm asked for a file that is not on tmpfs. */
    NOT_TMPFS,
    /** Medium file asked for a file on tmpfs. */
    TMPFS_NOT_DURABLE,
    /** Medium dax asked for a file whose filesystem refuses MAP_SYNC. */
    DAX_UNSUPPORTED,
    /** The section table holds 512 entries already. */
    TABLE_FULL,
    /** A range or length beyond what the medium holds (or a shrinking grow). */
    OUT_OF_RANGE,
    /** A system call failed. */
    IO
  }

  private final Reason reason;
  private final long value;

  private PoolException(Reason reason, String message, long value, Throwable cause) {
    super(message, cause);
    this.reason = reason;
    this.value = value;
  }

  private static PoolException of(Reason reason, String message) {
    return new PoolException(reason, message, -1, null);
  }

  public Reason reason() {
    return reason;
  }

  /** For {@link Reason#BUSY}: the holder's pid, when /proc/locks names it. */
  public OptionalLong holderPid() {
    return reason == Reason.BUSY && value >= 0 ? OptionalLong.of(value) : OptionalLong.empty();
  }

  /** For {@link Reason#UNSUPPORTED_VERSION}: the version the file has. */
  public OptionalLong foundVersion() {
    return reason == Reason.UNSUPPORTED_VERSION ? OptionalLong.of(value) : OptionalLong.empty();
  }

  /** For {@link Reason#LIVE_SLOT_DAMAGED}: the epoch of the intact previous commit. */
  public OptionalLong previousEpoch() {
    return reason == Reason.LIVE_SLOT_DAMAGED ? OptionalLong.of(value) : OptionalLong.empty();
  }

  static PoolException notFound(String path) {
    return of(Reason.NOT_FOUND,
        path + ": no such pool; create it first (e.g. `kioku pool create " + path + "`)");
  }

  static PoolException symlink(String path) {
    return of(Reason.SYMLINK, path + ": a symbolic link in a directory other users can write;"
        + " kioku does not follow it there (someone else may have planted it) — give the pool's"
        + " real path");
  }

  static PoolException exists(String path) {
    return of(Reason.ALREADY_EXISTS, path + ": a file already exists there; kioku never"
        + " overwrites it — pick another path or remove it yourself");
  }

  /** {@code pid} < 0 when the holder is unknown. */
  static PoolException busy(String path, long pid) {
    String holder = pid >= 0 ? "process " + pid : "another process (pid unknown)";
    return new PoolException(Reason.BUSY,
        path + ": pool is in use by " + holder + "; stop that process or use another pool",
        pid, null);
  }

  static PoolException notAPool(String path) {
    return of(Reason.NOT_A_POOL, path + ": not a kioku pool (bad magic); check the path");
  }

  static PoolException unsupportedVersion(String path, long found) {
    return new PoolException(Reason.UNSUPPORTED_VERSION, path + ": pool format version " + found
        + " is not supported (this kioku reads version " + Format.VERSION
        + "); use a matching kioku release", found, null);
  }

  static PoolException truncated(String path, String what, long needed, long found) {
    return of(Reason.TRUNCATED, path + ": truncated: " + what + " needs "
        + Long.toUnsignedString(needed) + " bytes but the file has " + found
        + "; restore the file from a copy");
  }

  static PoolException headerChecksum(String path, int stored, int computed) {
    return of(Reason.HEADER_CHECKSUM, path + ": header checksum mismatch (stored "
        + Format.hex32(stored) + ", computed " + Format.hex32(computed)
        + "); the header is damaged — restore the file from a copy");
  }

  static PoolException headerInvalid(String path, String field) {
    return of(Reason.HEADER_INVALID, path + ": header field '" + field
        + "' is invalid; the file is damaged or not written by kioku");
  }

  static PoolException pageSizeMismatch(String path, int pool, int system) {
    String p = Integer.toUnsignedString(pool);
    return of(Reason.PAGE_SIZE_MISMATCH, path + ": pool page size is " + p
        + " bytes but this system's is " + system + "; open it on a machine with " + p
        + "-byte pages");
  }

  static PoolException wrongKind(String path, String expected, String found) {
    return of(Reason.WRONG_KIND, path + ": pool holds '" + found + "' state, not '" + expected
        + "'; point this program at a '" + expected + "' pool");
  }

  static PoolException liveSlotDamaged(String path, int slot, String detail, long previousEpoch) {
    return new PoolException(Reason.LIVE_SLOT_DAMAGED, path + ": live commit slot " + slot
        + " is damaged (" + detail + "); the previous commit (epoch "
        + Long.toUnsignedString(previousEpoch) + ") is intact — reopen allowing rollback"
        + " (Pool.open with allowRollback, KIOKU_RECOVER_ALLOW_ROLLBACK) to use it, losing the"
        + " damaged commit", previousEpoch, null);
  }

  static PoolException commitDamaged(String path, String detail) {
    return of(Reason.COMMIT_DAMAGED, path + ": commit record damaged (" + detail
        + "); no intact commit is left — restore the file from a copy");
  }

  static PoolException tableFull(String path) {
    return of(Reason.TABLE_FULL, path + ": the pool holds at most " + Format.MAX_SECTIONS
        + " sections; remove one (and commit) first");
  }

  static PoolException daxUnsupported(String path, Throwable cause) {
    return new PoolException(Reason.DAX_UNSUPPORTED, path + ": the filesystem does not support"
        + " MAP_SYNC (not DAX); put the pool on a DAX-mounted pmem filesystem or choose"
        + " --medium file", -1, cause);
  }

  static PoolException notTmpfs(String path) {
    return of(Reason.NOT_TMPFS, path + ": medium shm needs a file on tmpfs (e.g. /dev/shm);"
        + " choose --medium file for a disk file");
  }

  static PoolException tmpfsNotDurable(String path) {
    return of(Reason.TMPFS_NOT_DURABLE, path + ": is on tmpfs, which does not survive power"
        + " loss; choose --medium shm to accept that");
  }

  static PoolException shrink(String path, long len, long newLen) {
    return of(Reason.OUT_OF_RANGE, path + ": cannot shrink the medium from " + len + " to "
        + newLen + " bytes; media only grow");
  }

  static PoolException tooLong(String path, long len, long max) {
    return of(Reason.OUT_OF_RANGE, path + ": " + len + " bytes is more than this medium can"
        + " hold (" + max + "); use a file medium for larger pools");
  }

  /** A failed system call {@code op} on {@code path}. */
  static PoolException io(String op, String path, Throwable cause) {
    String why = cause.getMessage() == null ? cause.getClass().getSimpleName() : cause.getMessage();
    return new PoolException(Reason.IO,
        op + " failed on " + path + ": " + why.replace('\n', ' '), -1, cause);
  }
}
