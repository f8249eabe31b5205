package kioku.persisttest.samples;

import java.util.ArrayList;
import java.util.List;
import java.util.function.IntUnaryOperator;

/**
 * Control flow around writes: loops, try/catch/finally, switches, synchronized blocks,
 * lambdas, long and double locals. {@link #run} gives the same answer instrumented or not.
 */
public class Flow {
  private long total;
  private double ratio;
  private int[] counts = new int[8];
  private Object lock = new Object();
  private final List<Object> seen = new ArrayList<>();

  public static long run(int n) {
    Flow f = new Flow();
    long acc = 0;
    for (int i = 0; i < n; i++) {
      acc += f.step(i);
      acc ^= f.tryCatch(i);
      acc += f.sync(i);
      acc += f.switched(i);
    }
    acc += f.lambdas(n);
    acc += f.nestedLoops(n);
    acc += f.earlyReturns(n);
    acc += (long) (f.ratio * 1000);
    return acc + f.total + f.seen.size();
  }

  long step(int i) {
    long local = i * 3L;
    double dl = i / 7.0;
    counts[i & 7] += i;
    total += local;
    ratio = dl + ratio / 2;
    if ((i & 1) == 0) {
      seen.add(i);
    }
    return counts[i & 7] + local;
  }

  long tryCatch(int i) {
    long r = 0;
    try {
      r += i;
      if (i % 5 == 3) throw new IllegalStateException("x" + i);
      counts[(i + 1) & 7] = i;
    } catch (IllegalStateException e) {
      counts[0] = e.getMessage().length();
      r -= 1;
    } finally {
      total++;
      r *= 2;
    }
    try {
      int[] small = new int[1];
      small[i % 3] = 1; // out of bounds for i % 3 > 0
      r += small[0];
    } catch (ArrayIndexOutOfBoundsException e) {
      r += 7;
    }
    return r;
  }

  int sync(int i) {
    synchronized (lock) {
      counts[1] += i;
      if (i % 4 == 0) return counts[1];
    }
    return -i;
  }

  @SuppressWarnings("fallthrough")
  int switched(int i) {
    switch (i % 4) {
      case 0:
        counts[2] = 1;
        break;
      case 1:
        counts[3] = counts[2] + 1;
        // fall through
      case 2:
        total += 2;
        return 3;
      default:
        String s = "k" + i;
        switch (s) {
          case "k3" -> counts[4] = 9;
          case "k7" -> counts[5] = 8;
          default -> seen.add(s);
        }
    }
    return counts[2];
  }

  long lambdas(int n) {
    long[] box = new long[1];
    IntUnaryOperator op = x -> {
      box[0] += x;
      counts[6] = x;
      return x * 2;
    };
    for (int i = 0; i < n; i++) op.applyAsInt(i);
    Runnable r = () -> total += box[0];
    r.run();
    return box[0];
  }

  long nestedLoops(int n) {
    long[][] grid = new long[4][];
    outer:
    for (int a = 0; a < grid.length; a++) {
      grid[a] = new long[n + 1];
      for (int b = 0; b <= n; b++) {
        if (b > a * 10) continue outer;
        grid[a][b] = (long) a * b;
        double[] dd = {a, b};
        dd[1] += dd[0];
        total += (long) dd[1];
      }
    }
    long s = 0;
    for (long[] row : grid) for (long v : row) s += v;
    return s;
  }

  int earlyReturns(int n) {
    int i = 0;
    while (true) {
      if (i > n) return i;
      counts[7] = i;
      if (counts[7] == 13) return -13;
      i++;
    }
  }
}
