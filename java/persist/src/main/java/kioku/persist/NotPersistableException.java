package kioku.persist;

/**
 * An object reachable from a durable root cannot be made persistent: its class's writes
 * cannot be intercepted (a JDK class outside the supported collections, a hidden class, an
 * uninstrumented class). The message names the class. The DRAM store that triggered it has
 * happened; the persistent state keeps its previous value.
 */
public class NotPersistableException extends PersistenceException {
  private static final long serialVersionUID = 1L;

  public NotPersistableException(String message) {
    super(message);
  }
}
