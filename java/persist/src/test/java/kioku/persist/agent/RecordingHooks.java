package kioku.persist.agent;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import kioku.persist.rt.FieldIds;
import kioku.persist.rt.Hooks;

/** A {@link Hooks} that records every call, for asserting what instrumented code reports. */
final class RecordingHooks implements Hooks {
  /**
   * One call. {@code id} is the field or root id, or the array index; {@code observed} is the
   * field's DRAM value when the hook ran (volatile hooks), or the value a reference store
   * replaced (the old elements for copied).
   */
  record Call(String kind, Object target, int id, long bits, Object ref, Object observed) {}

  private final List<Call> calls = new ArrayList<>();
  private int nextToken = 1;

  synchronized List<Call> calls() {
    return List.copyOf(calls);
  }

  synchronized List<Call> calls(String kind) {
    return calls.stream().filter(c -> c.kind().equals(kind)).toList();
  }

  synchronized void clear() {
    calls.clear();
  }

  private synchronized void add(String kind, Object target, int id, long bits, Object ref, Object observed) {
    calls.add(new Call(kind, target, id, bits, ref, observed));
  }

  @Override
  public void putPrimitive(Object o, long bits, int fieldId) {
    add("putPrimitive", o, fieldId, bits, null, null);
  }

  @Override
  public void putReference(Object o, Object value, Object old, int fieldId) {
    add("putReference", o, fieldId, 0, value, old);
  }

  @Override
  public void preVolatile(Object o, long bits, Object ref, int fieldId) {
    add("preVolatile", o, fieldId, bits, ref, read(o, fieldId));
  }

  @Override
  public void postVolatile(Object o, int fieldId) {
    add("postVolatile", o, fieldId, 0, null, read(o, fieldId));
  }

  @Override
  public void putRoot(Object value, Object old, int rootId) {
    add("putRoot", null, rootId, 0, value, old);
  }

  @Override
  public void rootsDeclared(Class<?> c) {
    add("rootsDeclared", c, 0, 0, null, null);
  }

  @Override
  public void storePrimitive(Object array, int index, long bits) {
    add("storePrimitive", array, index, bits, null, null);
  }

  @Override
  public void storeReference(Object[] array, int index, Object value, Object old) {
    add("storeReference", array, index, 0, value, old);
  }

  @Override
  public boolean wantsOldElements(Object dst) {
    return true;
  }

  @Override
  public void copied(Object dst, int dstPos, int length, Object[] oldElements) {
    add("copied", dst, dstPos, length, null, oldElements);
  }

  @Override
  public synchronized int faseEnter(Object receiver) {
    int token = nextToken++;
    add("faseEnter", receiver, token, 0, null, null);
    return token;
  }

  @Override
  public void faseExit(int token) {
    add("faseExit", null, token, 0, null, null);
  }

  @Override
  public void cloned(Object copy) {
    add("cloned", copy, 0, 0, null, null);
  }

  /** The field's current value, read reflectively (the instrumentation does not touch reads). */
  private static Object read(Object o, int fieldId) {
    FieldIds.FieldRef ref = FieldIds.WRITTEN.get(fieldId);
    for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
      try {
        Field f = c.getDeclaredField(ref.name());
        f.setAccessible(true);
        return f.get(o);
      } catch (NoSuchFieldException e) {
        // up
      } catch (IllegalAccessException e) {
        throw new AssertionError(e);
      }
    }
    throw new AssertionError("no field " + ref);
  }
}
