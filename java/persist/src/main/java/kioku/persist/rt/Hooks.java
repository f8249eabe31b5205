package kioku.persist.rt;

/**
 * What {@link Barrier} calls once persistence is active and the written object may have a
 * replica. The runtime implements it; tests of the instrumentation record the calls instead.
 * Every method runs after the DRAM store it reports (except {@link #preVolatile}).
 */
public interface Hooks {
  /** A putfield of a primitive field; {@code bits} is the value zero-extended to 64 bits. */
  void putPrimitive(Object o, long bits, int fieldId);

  /** A putfield of a reference field; {@code old} is what the field held before. */
  void putReference(Object o, Object value, Object old, int fieldId);

  /** Before a putfield of a volatile field: lock the object, write the replica first. */
  void preVolatile(Object o, long bits, Object ref, int fieldId);

  /** After that putfield: unlock. */
  void postVolatile(Object o, int fieldId);

  /** A putstatic of a {@code @DurableRoot} field; {@code old} is what it held before. */
  void putRoot(Object value, Object old, int rootId);

  /** The end of {@code <clinit>} of a class that declares durable roots. */
  void rootsDeclared(Class<?> c);

  /** An element store: {@code bits} is the element zero-extended (references use storeRef). */
  void storePrimitive(Object array, int index, long bits);

  /** A reference element store; {@code old} is the element it replaced. */
  void storeReference(Object[] array, int index, Object value, Object old);

  /** Before System.arraycopy into a reference array: whether to report the elements it replaces. */
  boolean wantsOldElements(Object dst);

  /**
   * After System.arraycopy into {@code dst}; {@code oldElements} are the replaced elements when
   * {@link #wantsOldElements} asked for them, else null.
   */
  void copied(Object dst, int dstPos, int length, Object[] oldElements);

  /** Entering a method of a persistent collection; returns a token for {@link #faseExit}. */
  int faseEnter(Object receiver);

  /** Leaving it (normally or by an exception). */
  void faseExit(int token);

  /** After Object.clone(): the copy must not share the original's replica word. */
  void cloned(Object copy);

  // Atomic writes (see Atomics). Operations: CAE returns the witness (the value before; the
  // write happened iff it equals expected); GET_AND_SET and GET_AND_ADD return the value
  // before; PUT returns 0 or null.

  int CAE = 1;
  int GET_AND_SET = 2;
  int GET_AND_ADD = 3;
  int PUT = 4;

  /**
   * An atomic write of an int at {@code offset} of {@code o}, which may be persistent: performs
   * it, making it durable before it is visible. The default performs it alone.
   */
  default int atomicInt(Object o, long offset, int op, int expected, int value) {
    return Atomics.performInt(o, offset, op, expected, value);
  }

  default long atomicLong(Object o, long offset, int op, long expected, long value) {
    return Atomics.performLong(o, offset, op, expected, value);
  }

  default Object atomicReference(Object o, long offset, int op, Object expected, Object value) {
    return Atomics.performReference(o, offset, op, expected, value);
  }

  /** An atomic write at {@code offset} of {@code o} ran while it was white; it may not be now. */
  default void wroteAt(Object o, long offset) {}

  /**
   * A VarHandle write of a field of {@code o} ({@code index} -1) or of element {@code index} of
   * the array {@code o} ran; make the replica follow.
   */
  default void varHandleWrote(java.lang.invoke.VarHandle vh, Object o, int index) {}
}
