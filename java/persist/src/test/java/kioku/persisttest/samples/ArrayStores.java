package kioku.persisttest.samples;

/** One store of each array kind. */
public final class ArrayStores {
  private ArrayStores() {}

  public static void storeAll(
      boolean[] z, byte[] b, char[] c, short[] s, int[] i, long[] j, float[] f, double[] d,
      Object[] l) {
    z[1] = true;
    b[1] = (byte) -1;
    c[1] = '\uffff';
    s[1] = (short) -2;
    i[1] = -3;
    j[1] = -4L;
    f[1] = -1.5f;
    d[1] = Math.E;
    l[1] = "v";
  }

  public static String[][] nested() {
    String[][] grid = new String[2][2];
    grid[1] = new String[] {"a", "b"};
    grid[0][1] = "c";
    return grid;
  }

  public static int[] copy(int[] src, int[] dst) {
    System.arraycopy(src, 1, dst, 2, 3);
    return dst;
  }
}
