package kioku.persist.pool;

/** The four persistence media (docs/media.md); the code is what a pool header records. */
public enum MediumKind {
  /** Persistent memory on a DAX filesystem, mapped with MAP_SYNC. */
  DAX(1, "dax", "survives power loss (persistent memory)"),
  /** An ordinary file, written back with msync. */
  FILE(2, "file", "survives power loss (written back with msync)"),
  /** A file on tmpfs (/dev/shm). */
  SHM(3, "shm", "survives process death, NOT power loss or reboot (tmpfs)"),
  /** Simulated persistent memory for power-cut tests. */
  SIM(4, "sim", "simulated: survives only what a power cut would keep");

  private final int code;
  private final String label;
  private final String durability;

  MediumKind(int code, String label, String durability) {
    this.code = code;
    this.label = label;
    this.durability = durability;
  }

  /** The number stored in the pool header (offset 36). */
  public int code() {
    return code;
  }

  /** The kind for a header code, or null when the code is unknown. */
  public static MediumKind fromCode(int code) {
    for (MediumKind k : values()) {
      if (k.code == code) {
        return k;
      }
    }
    return null;
  }

  /** What survives on this medium, for the log line shown when it is chosen. */
  public String durability() {
    return durability;
  }

  /** Lower-case name, as on the command line ("dax", "file", ...). */
  @Override
  public String toString() {
    return label;
  }
}
