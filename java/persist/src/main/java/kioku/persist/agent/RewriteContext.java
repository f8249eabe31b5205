package kioku.persist.agent;

import kioku.persist.rt.FieldIds;

/**
 * Everything the method rewriters of one class need: who defines it, what it declares, and
 * how to number the fields it writes. Also counts the rewrites (for verbose output).
 */
final class RewriteContext {
  final ClassLoader loader;
  final ClassInfo self;
  /**
   * A retransformed JDK class: its store sites pass the barrier {@code false} for "is an
   * instrumented object" instead of testing it (see BarrierMethodAdapter#isPersistentType).
   */
  final boolean jdk;
  private final ClassInfoSource source;
  private final ClassFilter filter;

  int fieldWrites;
  int volatileWrites;
  int arrayStores;
  int rootStores;
  int arraycopies;
  int clones;
  int atomicWrites;
  int faseMethods;

  RewriteContext(
      ClassLoader loader, ClassInfo self, ClassInfoSource source, ClassFilter filter, boolean jdk) {
    this.loader = loader;
    this.self = self;
    this.jdk = jdk;
    this.source = source;
    this.filter = filter;
  }

  /** A putfield's field number and volatility. */
  record FieldWrite(int id, boolean isVolatile) {}

  /**
   * Numbers the field a putfield writes, by its declaring class when the class files say which
   * (so one field has one id whichever subclass's name the bytecode uses), else by the
   * instruction's owner (then assumed non-volatile).
   */
  FieldWrite fieldWrite(String owner, String name, String desc) {
    ClassInfoSource.Resolved r = source.resolveField(loader, self, owner, name, desc);
    boolean isVolatile = r.field() != null && r.field().isVolatile();
    return new FieldWrite(FieldIds.WRITTEN.register(r.owner(), name, desc, isVolatile), isVolatile);
  }

  /** The root number of a putstatic's field, or 0 if it is not a durable root. */
  int rootId(String owner, String name, String desc) {
    if (desc.charAt(0) != 'L' && desc.charAt(0) != '[') return 0;
    ClassInfoSource.Resolved r = source.resolveField(loader, self, owner, name, desc);
    if (r.field() == null || !r.field().isRoot()) return 0;
    return FieldIds.ROOTS.register(r.owner(), name, desc, false);
  }

  /**
   * Whether a virtual call of {@code owner.clone()} may reach a clone() whose super.clone()
   * is not instrumented (Object's, or an uninstrumented JDK class's): then the copy would keep
   * the original's replica word unless the call site resets it.
   */
  boolean cloneMayCopyWord(String owner) {
    if (owner.charAt(0) == '[') return false; // arrays have no replica word
    String declarer = source.declarerOf(loader, self, owner, Names.CLONE, Names.OBJECT_CLONE_DESC);
    return declarer == null || !filter.isInstrumentedName(declarer);
  }

  String summary() {
    return fieldWrites + " field writes (" + volatileWrites + " volatile), "
        + arrayStores + " array stores, " + rootStores + " root stores, "
        + arraycopies + " arraycopies, " + clones + " clones"
        + (atomicWrites > 0 ? ", " + atomicWrites + " atomic writes" : "")
        + (faseMethods > 0 ? ", " + faseMethods + " atomic methods" : "");
  }
}
