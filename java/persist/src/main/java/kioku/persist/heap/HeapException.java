package kioku.persist.heap;

/** A persistent heap that cannot be opened or used; the message says what to do. */
public final class HeapException extends Exception {
  private static final long serialVersionUID = 1L;

  public enum Reason {
    /** The pool holds something else, or a heap of another layout version. */
    WRONG_POOL,
    /** A checksum or structure check failed. */
    DAMAGED,
    /** A class changed incompatibly since its objects were made persistent. */
    INCOMPATIBLE_CLASS,
    /** A class of the heap cannot be found. */
    MISSING_CLASS,
    /** The heap, the class table or the root table is full. */
    FULL,
    /** The pool could not be opened, created or grown. */
    POOL
  }

  private final Reason reason;

  public HeapException(Reason reason, String message) {
    super(message);
    this.reason = reason;
  }

  public HeapException(Reason reason, String message, Throwable cause) {
    super(message, cause);
    this.reason = reason;
  }

  public Reason reason() {
    return reason;
  }
}
