package kioku.persisttest.samples;

/** Fields of every kind, written by plain methods. */
public class Fields {
  public boolean z;
  public byte b;
  public char c;
  public short s;
  public int i;
  public long j;
  public float f;
  public double d;
  public Object ref;
  public int[] ints;
  public volatile int vi;
  public volatile long vj;
  public volatile boolean vz;
  public volatile Object vref;

  public void writeAll() {
    z = true;
    b = (byte) -1;
    c = '\uffff';
    s = (short) -2;
    i = -3;
    j = -4L;
    f = -1.5f;
    d = Math.PI;
    ref = "x";
    ints = new int[] {1};
  }

  public void writeVolatiles() {
    vi = -7;
    vj = Long.MIN_VALUE;
    vz = true;
    vref = this;
  }

  /** Writes a field of another object of another class. */
  public static void writeOther(Fields target, Sub other) {
    other.extra = 5;
    other.i = 6; // inherited field, named through the subclass
    target.i = 8;
  }

  /** Inherits the replica word from Fields. */
  public static class Sub extends Fields {
    public int extra;
  }
}
