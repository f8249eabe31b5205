package kioku.persist.pool;

/** Why a commit slot or a section table cannot be used (a detail for the error message). */
final class FormatProblem extends Exception {
  private static final long serialVersionUID = 1L;

  FormatProblem(String detail) {
    super(detail, null, false, false);
  }
}
