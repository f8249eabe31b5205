package kioku.bench.persist;

import java.nio.file.Files;
import java.nio.file.Path;
import kioku.persist.KiokuPersist;

/**
 * Target 5: recovery time per GB of replicas. One JVM per step, run by bench.py:
 *
 * <pre>
 * build PATH SHAPE BYTES   open a new pool (shm), make chunks persistent under a root until the
 *                          heap holds BYTES of replicas; print the numbers; exit
 * recover PATH SHAPE       open the pool, then initialize the root's class (which recovers the
 *                          graph and assigns it), timed; check the graph; print the numbers
 * plain SHAPE CHUNKS       (no agent) build the same graph in ordinary memory, timed: the baseline
 * </pre>
 *
 * SHAPE: {@code objects} (each chunk a linked list of 8192 {@link Item}s, 4 slots each),
 * {@code arrays} (each chunk a long[40960]), {@code mixed} (the two alternating, about half the
 * bytes each), {@code shuffled} (as {@code objects}, then every Item relinked in a seeded random
 * order, so that following the lists visits the replicas in no address order: the heap of a
 * program that kept changing its graph). Output: one line {@code RESULT key=value ...}.
 */
public final class RecoveryMain {
  static final int ITEMS_PER_CHUNK = 8192;
  static final int LONGS_PER_CHUNK = 40960;
  static final int MAX_CHUNKS = 1 << 16;

  public static void main(String[] args) throws Exception {
    switch (args[0]) {
      case "build" -> build(Path.of(args[1]), args[2], Long.parseLong(args[3]));
      case "recover" -> recover(Path.of(args[1]), args[2]);
      case "plain" -> plain(args[1], Integer.parseInt(args[2]));
      default -> throw new IllegalArgumentException("build | recover | plain");
    }
  }

  static boolean isItems(String shape, int i) {
    return switch (shape) {
      case "objects", "shuffled" -> true;
      case "arrays" -> false;
      case "mixed" -> (i & 1) == 0;
      default -> throw new IllegalArgumentException("unknown shape " + shape);
    };
  }

  static Object chunk(String shape, int i) {
    if (isItems(shape, i)) {
      Item head = null;
      for (int k = 0; k < ITEMS_PER_CHUNK; k++) {
        Item it = new Item();
        it.id = (long) i * ITEMS_PER_CHUNK + k;
        it.count = k;
        it.price = k * 0.5;
        it.next = head;
        head = it;
      }
      return head;
    }
    long[] a = new long[LONGS_PER_CHUNK];
    for (int k = 0; k < a.length; k++) a[k] = (long) i * LONGS_PER_CHUNK + k;
    return a;
  }

  /**
   * Relinks the Items of the first {@code n} chunks (persistent: every store goes to the
   * replicas) in a seeded random order, {@link #ITEMS_PER_CHUNK} per chunk: the same objects
   * and checksum, in lists whose order no longer follows the replicas' addresses.
   */
  static void shuffle(Object[] chunks, int n) {
    Item[] all = new Item[n * ITEMS_PER_CHUNK];
    int k = 0;
    for (int i = 0; i < n; i++) for (Item it = (Item) chunks[i]; it != null; it = it.next) all[k++] = it;
    java.util.Random rnd = new java.util.Random(42);
    for (int i = all.length - 1; i > 0; i--) {
      int j = rnd.nextInt(i + 1);
      Item t = all[i];
      all[i] = all[j];
      all[j] = t;
    }
    for (int i = 0; i < n; i++) {
      int from = i * ITEMS_PER_CHUNK;
      for (int j = from; j < from + ITEMS_PER_CHUNK - 1; j++) all[j].next = all[j + 1];
      all[from + ITEMS_PER_CHUNK - 1].next = null;
      chunks[i] = all[from];
    }
  }

  /** A checksum of the graph, and its object count, as {checksum, objects}. */
  static long[] check(Object[] chunks) {
    long sum = 0;
    long objects = 1;
    for (Object c : chunks) {
      if (c == null) continue;
      objects++;
      if (c instanceof long[] a) {
        for (long v : a) sum += v;
      } else {
        for (Item it = (Item) c; it != null; it = it.next) {
          sum += it.id * 3 + it.count + (long) it.price;
          if (it.next != null) objects++;
        }
      }
    }
    return new long[] {sum, objects};
  }

  static void build(Path pool, String shape, long target) {
    long c0 = processCpuNanos();
    long t0 = System.nanoTime();
    KiokuPersist.open(pool, "shm");
    RecoveryRoots.chunks = new Object[MAX_CHUNKS];
    Object[] chunks = RecoveryRoots.chunks;
    int n = 0;
    while (KiokuPersist.stats().usedBytes() < target) {
      if (n == MAX_CHUNKS) throw new IllegalStateException("too many chunks");
      chunks[n] = chunk(shape, n); // make_persistent of the chunk
      n++;
    }
    if (shape.equals("shuffled")) shuffle(chunks, n);
    double seconds = (System.nanoTime() - t0) / 1e9;
    double cpuSeconds = (processCpuNanos() - c0) / 1e9;
    long[] c = check(chunks);
    var s = KiokuPersist.stats();
    System.out.println(
        "RESULT step=build shape=" + shape + " chunks=" + n + " usedBytes=" + s.usedBytes()
            + " capacityBytes=" + s.capacityBytes() + " persistentObjects=" + s.persistentObjects()
            + " graphObjects=" + c[1] + " checksum=" + c[0] + " seconds=" + seconds
            + " cpuSeconds=" + cpuSeconds + " gcRuns=" + s.gcRuns());
    KiokuPersist.close();
  }

  static void recover(Path pool, String shape) throws Exception {
    if (!Files.exists(pool)) throw new IllegalStateException(pool + " is missing");
    long c0 = processCpuNanos();
    long t0 = System.nanoTime();
    boolean data = KiokuPersist.open(pool, "shm");
    long t1 = System.nanoTime();
    // Initializing the root's class recovers the graph (rootsDeclared at the end of <clinit>).
    Class.forName("kioku.bench.persist.RecoveryRoots", true, RecoveryMain.class.getClassLoader());
    Object[] chunks = RecoveryRoots.chunks;
    long t2 = System.nanoTime();
    long c2 = processCpuNanos();
    if (!data || chunks == null) throw new IllegalStateException("nothing recovered");
    long[] c = check(chunks);
    long t3 = System.nanoTime();
    var s = KiokuPersist.stats();
    System.out.println(
        "RESULT step=recover shape=" + shape + " usedBytes=" + s.usedBytes() + " persistentObjects="
            + s.persistentObjects() + " graphObjects=" + c[1] + " checksum=" + c[0]
            + " openSeconds=" + (t1 - t0) / 1e9 + " rootSeconds=" + (t2 - t1) / 1e9
            + " seconds=" + (t2 - t0) / 1e9 + " cpuSeconds=" + (c2 - c0) / 1e9 + " traverseSeconds=" + (t3 - t2) / 1e9
            + " peakRssKiB=" + peakRssKiB());
    KiokuPersist.close();
  }

  static void plain(String shape, int n) throws java.io.IOException {
    long c0 = processCpuNanos();
    long t0 = System.nanoTime();
    Object[] chunks = new Object[MAX_CHUNKS];
    for (int i = 0; i < n; i++) chunks[i] = chunk(shape, i);
    long t1 = System.nanoTime();
    long c1 = processCpuNanos();
    long[] c = check(chunks);
    System.out.println(
        "RESULT step=plain shape=" + shape + " chunks=" + n + " graphObjects=" + c[1] + " checksum="
            + c[0] + " seconds=" + (t1 - t0) / 1e9 + " cpuSeconds=" + (c1 - c0) / 1e9 + " peakRssKiB=" + peakRssKiB());
  }

  /**
   * CPU time of the whole process (every thread: the GC's too), which a loaded machine does not
   * stretch as it stretches wall time.
   */
  static long processCpuNanos() {
    return ((com.sun.management.OperatingSystemMXBean)
            java.lang.management.ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime();
  }

  /**
   * The process's peak resident set (VmHWM): the JVM, its heap and, after a recovery, the pages
   * of the pool it mapped and read.
   */
  static long peakRssKiB() throws java.io.IOException {
    for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
      if (line.startsWith("VmHWM:")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
    }
    return -1;
  }
}
