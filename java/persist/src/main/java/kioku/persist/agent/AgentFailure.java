package kioku.persist.agent;

/** An expected startup failure: reported as one line, then the JVM exits with status 2. */
final class AgentFailure extends Exception {
  private static final long serialVersionUID = 1L;

  private final String todo;

  AgentFailure(String what, String todo) {
    super(what);
    this.todo = todo;
  }

  AgentFailure(String what, String todo, Throwable cause) {
    super(what + ": " + Log.reason(cause), cause);
    this.todo = todo;
  }

  /** What the user should do about it. */
  String todo() {
    return todo;
  }
}
