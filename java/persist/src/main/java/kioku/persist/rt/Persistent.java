package kioku.persist.rt;

/**
 * Implemented by every class the agent instruments: the injected replica word. The word is 0
 * while the object has no replica (white); otherwise it holds the replica's heap address and
 * its colour bits ({@link ReplicaWord}). Objects of other classes (JDK classes, arrays) keep the
 * same word in a side table.
 */
public interface Persistent {
  /** The replica word, a plain read. */
  long $kioku$r();

  /** Sets the replica word (plain store); concurrent updates go through the runtime's CAS. */
  void $kioku$r(long word);
}
