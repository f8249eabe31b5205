package kioku.persist.agent;

/** Internal names and descriptors the instrumentation emits or recognizes. */
final class Names {
  private Names() {}

  static final String BARRIER = "kioku/persist/rt/Barrier";
  static final String PERSISTENT = "kioku/persist/rt/Persistent";
  static final String DURABLE_ROOT_DESC = "Lkioku/persist/DurableRoot;";

  /** The injected replica word: a field and its two accessors (see {@code Persistent}). */
  static final String WORD = "$kioku$r";

  static final String OBJECT = "java/lang/Object";
  static final String THROWABLE = "java/lang/Throwable";
  static final String SYSTEM = "java/lang/System";
  static final String ARRAYCOPY_DESC = "(Ljava/lang/Object;ILjava/lang/Object;II)V";
  static final String CLONE = "clone";
  static final String OBJECT_CLONE_DESC = "()Ljava/lang/Object;";

  /** Binary name (dots) for messages, from an internal name (slashes). */
  static String dotted(String internalName) {
    return internalName.replace('/', '.');
  }
}
