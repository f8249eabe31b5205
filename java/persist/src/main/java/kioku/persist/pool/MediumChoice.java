package kioku.persist.pool;

import java.util.Locale;

/**
 * How a caller asks for a medium when opening a pool file: {@link #AUTO} (dax where MAP_SYNC
 * works, shm on tmpfs, else file) or exactly one kind. There is no SIM choice: the simulator
 * holds no files ({@link SimMedium#load} reopens a saved image).
 */
public enum MediumChoice {
  AUTO(null),
  DAX(MediumKind.DAX),
  FILE(MediumKind.FILE),
  SHM(MediumKind.SHM);

  private final MediumKind kind;

  MediumChoice(MediumKind kind) {
    this.kind = kind;
  }

  /** The kind asked for, or null for {@link #AUTO}. */
  public MediumKind kind() {
    return kind;
  }

  /** Exactly {@code kind}; SIM is refused because the simulator cannot hold a pool file. */
  public static MediumChoice exactly(MediumKind kind) {
    return switch (kind) {
      case DAX -> DAX;
      case FILE -> FILE;
      case SHM -> SHM;
      case SIM -> throw new IllegalArgumentException(SIM_REFUSED);
    };
  }

  /** Parses "auto", "dax", "file" or "shm" (as in {@code --medium} or an agent argument). */
  public static MediumChoice parse(String text) {
    String s = text == null ? "" : text.trim().toLowerCase(Locale.ROOT);
    return switch (s) {
      case "auto" -> AUTO;
      case "dax" -> DAX;
      case "file" -> FILE;
      case "shm" -> SHM;
      case "sim" -> throw new IllegalArgumentException(SIM_REFUSED);
      default -> throw new IllegalArgumentException(
          "unknown medium '" + text + "' (choose auto, dax, file or shm)");
    };
  }

  static final String SIM_REFUSED =
      "medium sim cannot hold a pool file; tests build a kioku.persist.pool.SimMedium directly"
          + " (SimMedium.load reopens a saved image)";

  @Override
  public String toString() {
    return kind == null ? "auto" : kind.toString();
  }
}
