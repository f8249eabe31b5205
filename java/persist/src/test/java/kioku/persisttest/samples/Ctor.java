package kioku.persisttest.samples;

import kioku.persist.rt.Persistent;

/** Constructor writes around super()/this(), observable because the word is set first. */
public class Ctor {
  public int x;
  public String name;

  public Ctor(int x) {
    super();
    ((Persistent) (Object) this).$kioku$r(7);
    this.x = x;
    this.name = "n" + x;
  }

  public Ctor() {
    this(this0Value());
    this.x = 99;
  }

  public int y;

  /**
   * Writes another object's field and an array element in this()'s argument (before this is
   * initialized), then catches an exception after it.
   */
  public Ctor(Ctor other, int[] arr, String s) {
    this(other.y = arr[0] = 5);
    try {
      this.x = Integer.parseInt(s);
    } catch (NumberFormatException e) {
      this.x = -1;
    }
  }

  private static int this0Value() {
    return 41;
  }
}
