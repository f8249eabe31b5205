package kioku.persist;

/** The persistent heap cannot do what was asked; the message is one line saying what to do. */
public class PersistenceException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public PersistenceException(String message) {
    super(message);
  }

  public PersistenceException(String message, Throwable cause) {
    super(message, cause);
  }
}
