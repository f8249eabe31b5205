package kioku.bench.persist;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.common.collect.ArrayListMultimap;
import com.google.common.collect.ImmutableSortedMap;
import com.google.common.collect.ListMultimap;
import com.google.common.collect.Multiset;
import com.google.common.collect.TreeMultiset;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.commons.compress.compressors.bzip2.BZip2CompressorInputStream;
import org.apache.commons.math3.linear.Array2DRowRealMatrix;
import org.apache.commons.math3.linear.LUDecomposition;
import org.apache.commons.math3.linear.RealMatrix;
import org.apache.commons.math3.stat.descriptive.DescriptiveStatistics;
import org.apache.commons.math3.transform.DftNormalization;
import org.apache.commons.math3.transform.FastFourierTransformer;
import org.apache.commons.math3.transform.TransformType;
import org.apache.commons.compress.compressors.bzip2.BZip2CompressorOutputStream;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.tukaani.xz.LZMA2Options;
import org.tukaani.xz.XZInputStream;
import org.tukaani.xz.XZOutputStream;

/**
 * Target 1: whole workloads, each run in three JVM configurations by run.sh (no agent; agent
 * without a pool; agent with a pool open and something persistent, {@link Activation}). Nothing
 * a workload touches is persistent. Each returns a value derived from all of its work.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
public class Workloads {
  private String[] words; // 200k words over a 20k vocabulary
  private int[] randomInts;
  private long[] unsortedLongs;
  private Orders book;
  private byte[] json;
  private ObjectMapper mapper;
  private byte[] bzipInput;
  private byte[] xzInput;
  private double[][] matrix; // 120 x 120, well conditioned
  private double[] signal; // 16k samples

  @Setup(Level.Trial)
  public void setup() throws IOException {
    Activation.fromProperty();
    words = Texts.words(Texts.vocabulary(20_000, 1), 200_000, 2);
    Random r = new Random(3);
    randomInts = new int[30_000];
    for (int i = 0; i < randomInts.length; i++) randomInts[i] = r.nextInt(1 << 20);
    unsortedLongs = new long[100_000];
    for (int i = 0; i < unsortedLongs.length; i++) unsortedLongs[i] = r.nextLong();
    mapper = new ObjectMapper();
    book = Orders.generate(1500, 4);
    json = mapper.writeValueAsBytes(book);
    bzipInput = Texts.text(64 << 10, 5);
    xzInput = Texts.text(64 << 10, 6);
    matrix = new double[120][120];
    for (int i = 0; i < matrix.length; i++) {
      for (int j = 0; j < matrix.length; j++) matrix[i][j] = r.nextDouble() + (i == j ? 120 : 0);
    }
    signal = new double[1 << 14];
    for (int i = 0; i < signal.length; i++) signal[i] = Math.sin(i * 0.01) + r.nextGaussian() * 0.1;
    // The round trips must give back their input.
    if (bzip2() != bzipInput.length || xz() != xzInput.length) {
      throw new IllegalStateException("compression round trip failed");
    }
    if (jsonParse() != book.getOrders().size()) throw new IllegalStateException("JSON parse failed");
  }

  /** Word frequencies in a HashMap, then the most frequent word's count. */
  @Benchmark
  public int hashMap() {
    HashMap<String, Integer> counts = new HashMap<>();
    for (String w : words) {
      Integer c = counts.get(w);
      counts.put(w, c == null ? 1 : c + 1);
    }
    int best = 0;
    for (Map.Entry<String, Integer> e : counts.entrySet()) best = Math.max(best, e.getValue());
    return best + counts.size();
  }

  /** TreeMap: insert 30k keys, floor lookups, remove half, iterate. */
  @Benchmark
  public long treeMap() {
    TreeMap<Integer, Integer> t = new TreeMap<>();
    for (int i = 0; i < randomInts.length; i++) t.put(randomInts[i], i);
    long acc = 0;
    for (int i = 0; i < randomInts.length; i += 2) {
      Integer k = t.floorKey(randomInts[i] - 1);
      if (k != null) acc += k;
    }
    for (int i = 0; i < randomInts.length; i += 2) t.remove(randomInts[i]);
    for (Map.Entry<Integer, Integer> e : t.entrySet()) acc += e.getValue();
    return acc + t.size();
  }

  /** ArrayList: add 50k words, sort, de-duplicate into another list, reverse. */
  @Benchmark
  public int arrayList() {
    ArrayList<String> l = new ArrayList<>();
    for (int i = 0; i < 50_000; i++) l.add(words[i]);
    Collections.sort(l);
    ArrayList<String> distinct = new ArrayList<>();
    String last = null;
    for (String s : l) {
      if (!s.equals(last)) distinct.add(s);
      last = s;
    }
    Collections.reverse(distinct);
    return distinct.size() + distinct.get(0).length();
  }

  /** Top-down merge sort of 100k longs in application code (array stores). */
  @Benchmark
  public long mergeSort() {
    long[] a = unsortedLongs.clone();
    long[] tmp = new long[a.length];
    sort(a, tmp, 0, a.length);
    return a[0] ^ a[a.length / 2] ^ a[a.length - 1];
  }

  private static void sort(long[] a, long[] tmp, int from, int to) {
    if (to - from < 24) {
      for (int i = from + 1; i < to; i++) {
        long v = a[i];
        int j = i - 1;
        while (j >= from && a[j] > v) {
          a[j + 1] = a[j];
          j--;
        }
        a[j + 1] = v;
      }
      return;
    }
    int mid = (from + to) >>> 1;
    sort(a, tmp, from, mid);
    sort(a, tmp, mid, to);
    int i = from, j = mid, k = from;
    while (i < mid && j < to) tmp[k++] = a[i] <= a[j] ? a[i++] : a[j++];
    while (i < mid) tmp[k++] = a[i++];
    while (j < to) tmp[k++] = a[j++];
    for (k = from; k < to; k++) a[k] = tmp[k];
  }

  /** The n-body simulation (5 bodies, 20k steps): putfield of doubles in application objects. */
  @Benchmark
  public double nbody() {
    Body[] bodies = Body.system();
    for (int s = 0; s < 20_000; s++) Body.advance(bodies, 0.01);
    return Body.energy(bodies);
  }

  /**
   * Guava collections: the 200k words into an ArrayListMultimap by first letter and a
   * TreeMultiset, then an ImmutableSortedMap of the counts of the 1,000 most common.
   */
  @Benchmark
  public int guava() {
    ListMultimap<Character, String> byLetter = ArrayListMultimap.create();
    Multiset<String> counts = TreeMultiset.create();
    for (String w : words) {
      byLetter.put(w.charAt(0), w);
      counts.add(w);
    }
    ImmutableSortedMap.Builder<String, Integer> top = ImmutableSortedMap.naturalOrder();
    int n = 0;
    for (Multiset.Entry<String> e : counts.entrySet()) {
      if (e.getCount() > 12 && n++ < 1000) top.put(e.getElement(), e.getCount());
    }
    return byLetter.keySet().size() + top.buildOrThrow().size() + counts.size();
  }

  /**
   * commons-math: LU decomposition and inverse of a 120 x 120 matrix, a 16k-point FFT and
   * descriptive statistics of its magnitudes.
   */
  @Benchmark
  public double commonsMath() {
    RealMatrix m = new Array2DRowRealMatrix(matrix, false);
    RealMatrix inv = new LUDecomposition(m).getSolver().getInverse();
    var spectrum = new FastFourierTransformer(DftNormalization.STANDARD)
        .transform(signal, TransformType.FORWARD);
    DescriptiveStatistics stats = new DescriptiveStatistics();
    for (var c : spectrum) stats.addValue(c.abs());
    return inv.getEntry(3, 7) + stats.getPercentile(90) + stats.getMean();
  }

  /** Jackson databind: ~1 MB of JSON into beans (setters). */
  @Benchmark
  public int jsonParse() throws IOException {
    Orders o = mapper.readValue(json, Orders.class);
    return o.getOrders().size();
  }

  /** Jackson databind: the beans back to JSON bytes. */
  @Benchmark
  public int jsonWrite() throws IOException {
    return mapper.writeValueAsBytes(book).length;
  }

  /** commons-compress bzip2 (pure Java), 100 kB blocks: compress 64 KiB of text, decompress it. */
  @Benchmark
  public int bzip2() throws IOException {
    ByteArrayOutputStream bos = new ByteArrayOutputStream();
    try (OutputStream out = new BZip2CompressorOutputStream(bos, 1)) {
      out.write(bzipInput);
    }
    try (InputStream in = new BZip2CompressorInputStream(new ByteArrayInputStream(bos.toByteArray()))) {
      return readAll(in, bzipInput);
    }
  }

  /**
   * XZ for Java (LZMA2, pure Java), preset 3 with a 64 KiB dictionary (the input's size, so
   * that the match finder's tables, allocated per stream, do not dominate): compress 64 KiB of
   * text, decompress it.
   */
  @Benchmark
  public int xz() throws IOException {
    ByteArrayOutputStream bos = new ByteArrayOutputStream();
    LZMA2Options options = new LZMA2Options(3);
    options.setDictSize(64 << 10);
    try (OutputStream out = new XZOutputStream(bos, options)) {
      out.write(xzInput);
    }
    try (InputStream in = new XZInputStream(new ByteArrayInputStream(bos.toByteArray()))) {
      return readAll(in, xzInput);
    }
  }

  /** Reads the stream to its end; returns its length if it equals {@code expect}, else -1. */
  private static int readAll(InputStream in, byte[] expect) throws IOException {
    byte[] buf = new byte[expect.length + 1];
    int n = 0;
    while (true) {
      int k = in.read(buf, n, buf.length - n);
      if (k < 0) break;
      n += k;
      if (n == buf.length) return -1;
    }
    if (n != expect.length) return -1;
    for (int i = 0; i < n; i++) if (buf[i] != expect[i]) return -1;
    return n;
  }

  /** The benchmark-game n-body system. */
  static final class Body {
    static final double PI = 3.141592653589793;
    static final double SOLAR_MASS = 4 * PI * PI;
    static final double DAYS_PER_YEAR = 365.24;

    double x, y, z, vx, vy, vz, mass;

    Body(double x, double y, double z, double vx, double vy, double vz, double mass) {
      this.x = x;
      this.y = y;
      this.z = z;
      this.vx = vx * DAYS_PER_YEAR;
      this.vy = vy * DAYS_PER_YEAR;
      this.vz = vz * DAYS_PER_YEAR;
      this.mass = mass * SOLAR_MASS;
    }

    static Body[] system() {
      Body[] b = {
        new Body(0, 0, 0, 0, 0, 0, 1),
        new Body(4.84143144246472090e+00, -1.16032004402742839e+00, -1.03622044471123109e-01,
            1.66007664274403694e-03, 7.69901118419740425e-03, -6.90460016972063023e-05,
            9.54791938424326609e-04),
        new Body(8.34336671824457987e+00, 4.12479856412430479e+00, -4.03523417114321381e-01,
            -2.76742510726862411e-03, 4.99852801234917238e-03, 2.30417297573763929e-05,
            2.85885980666130812e-04),
        new Body(1.28943695621391310e+01, -1.51111514016986312e+01, -2.23307578892655734e-01,
            2.96460137564761618e-03, 2.37847173959480950e-03, -2.96589568540237556e-05,
            4.36624404335156298e-05),
        new Body(1.53796971148509165e+01, -2.59193146099879641e+01, 1.79258772950371181e-01,
            2.68067772490389322e-03, 1.62824170038242295e-03, -9.51592254519715870e-05,
            5.15138902046611451e-05)
      };
      double px = 0, py = 0, pz = 0;
      for (Body x : b) {
        px += x.vx * x.mass;
        py += x.vy * x.mass;
        pz += x.vz * x.mass;
      }
      b[0].vx = -px / SOLAR_MASS;
      b[0].vy = -py / SOLAR_MASS;
      b[0].vz = -pz / SOLAR_MASS;
      return b;
    }

    static void advance(Body[] b, double dt) {
      for (int i = 0; i < b.length; i++) {
        Body bi = b[i];
        for (int j = i + 1; j < b.length; j++) {
          Body bj = b[j];
          double dx = bi.x - bj.x, dy = bi.y - bj.y, dz = bi.z - bj.z;
          double d2 = dx * dx + dy * dy + dz * dz;
          double mag = dt / (d2 * Math.sqrt(d2));
          bi.vx -= dx * bj.mass * mag;
          bi.vy -= dy * bj.mass * mag;
          bi.vz -= dz * bj.mass * mag;
          bj.vx += dx * bi.mass * mag;
          bj.vy += dy * bi.mass * mag;
          bj.vz += dz * bi.mass * mag;
        }
      }
      for (Body x : b) {
        x.x += dt * x.vx;
        x.y += dt * x.vy;
        x.z += dt * x.vz;
      }
    }

    static double energy(Body[] b) {
      double e = 0;
      for (int i = 0; i < b.length; i++) {
        Body bi = b[i];
        e += 0.5 * bi.mass * (bi.vx * bi.vx + bi.vy * bi.vy + bi.vz * bi.vz);
        for (int j = i + 1; j < b.length; j++) {
          Body bj = b[j];
          double dx = bi.x - bj.x, dy = bi.y - bj.y, dz = bi.z - bj.z;
          e -= bi.mass * bj.mass / Math.sqrt(dx * dx + dy * dy + dz * dz);
        }
      }
      return e;
    }
  }
}
