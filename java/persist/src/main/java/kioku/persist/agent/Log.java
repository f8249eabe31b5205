package kioku.persist.agent;

/**
 * The agent's only output: single lines on stderr prefixed {@code kioku-persist:}, never a
 * stack trace for an expected failure.
 */
final class Log {
  private Log() {}

  static void line(String message) {
    System.err.println("kioku-persist: " + message);
  }

  /** {@code <what failed>: <what to do>}. */
  static void failure(String what, String todo) {
    line(what + ": " + todo);
  }

  /** A throwable's class and message, on one line. */
  static String reason(Throwable t) {
    String m = t.getMessage();
    String s = t.getClass().getSimpleName() + (m == null ? "" : " (" + m + ")");
    return s.replace('\n', ' ').replace('\r', ' ');
  }
}
