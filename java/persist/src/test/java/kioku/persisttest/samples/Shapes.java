package kioku.persisttest.samples;

/** An enum and a record also get the replica word. */
public final class Shapes {
  private Shapes() {}

  public enum Color {
    RED,
    GREEN {
      @Override
      public String toString() {
        return "green";
      }
    }
  }

  public record Point(int x, long y, String label) {}
}
