package kioku.persist;

/** The idiomatic API. (Being written; the agent calls {@link #startFromAgent}.) */
public final class KiokuPersist {
  private KiokuPersist() {}

  /**
   * Called by the agent's premain after instrumentation is installed, with the agent's
   * argument string ({@code pool=PATH[,medium=...]}, or null).
   */
  public static void startFromAgent(String agentArgs) {}
}
