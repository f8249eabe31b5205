package kioku.bench.persist;

import java.io.IOException;
import java.lang.invoke.VarHandle;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * Target 3: stores into persistent objects per medium, against the same stores into identical
 * non-persistent objects in the same JVM, and against the medium's floor ({@link #durableFloor}:
 * one 8-byte store into a mapped file of the same kind made durable the way the medium does it).
 * Each invocation does {@value #OPS} stores, each one read-modify-write of the same location so
 * that no store of the harness itself (a counter field would pay a barrier too) is in the loop.
 * By hand, {@code -p medium=none} without the agent runs the *_plain stores in a plain JVM.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class WriteBench {
  static final int OPS = 16;

  @Param({"shm", "file"})
  public String medium;

  private Cell cellPlain;
  private Cell cellPersistent;
  private int[] intsPlain;
  private int[] intsPersistent;
  private Object[] refsPlain;
  private Object[] refsPersistent;
  private HashMap<Integer, Integer> mapPlain;
  private HashMap<Integer, Integer> mapPersistent;
  private Integer[] keys;
  private Integer[] valuesA;
  private Integer[] valuesB;
  private Object a;
  private Object b;
  private Path floorFile;
  private FileChannel floorChannel;
  private MappedByteBuffer floor;

  @Setup(Level.Trial)
  public void setup() throws IOException {
    boolean persist = !medium.equals("none");
    if (persist) {
      Pools.open(medium);
      String dir = System.getProperty(medium.equals("file") ? "kioku.bench.disk" : "kioku.bench.shm");
      floorFile = Path.of(dir, "floor-" + ProcessHandle.current().pid());
      floorChannel =
          FileChannel.open(
              floorFile, StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE);
      floor = floorChannel.map(FileChannel.MapMode.READ_WRITE, 0, 1 << 20);
      floor.putLong(4096, 0);
      floor.force();
    }
    cellPlain = new Cell();
    cellPersistent = new Cell();
    intsPlain = new int[OPS];
    intsPersistent = new int[OPS];
    refsPlain = new Object[OPS];
    refsPersistent = new Object[OPS];
    keys = new Integer[OPS];
    valuesA = new Integer[OPS];
    valuesB = new Integer[OPS];
    for (int i = 0; i < OPS; i++) {
      keys[i] = 1000 + i;
      valuesA[i] = 2000 + i;
      valuesB[i] = 3000 + i;
    }
    mapPlain = map();
    mapPersistent = map();
    Item ia = new Item();
    Item ib = new Item();
    ia.id = 1;
    ib.id = 2;
    a = ia;
    b = ib;
    if (persist) {
      // The stored values are persistent already (kept by a root), so a reference store costs
      // the store and its replica update, not a make_persistent.
      Roots.keep = new Object[] {a, b, valuesA, valuesB};
      Roots.cell = cellPersistent;
      Roots.writeInts = intsPersistent;
      Roots.writeRefs = refsPersistent;
      Roots.writeMap = mapPersistent;
      Pools.printStats("writes " + medium);
    }
  }

  private HashMap<Integer, Integer> map() {
    HashMap<Integer, Integer> m = new HashMap<>();
    for (int i = 0; i < 1024; i++) m.put(i, i);
    for (int i = 0; i < OPS; i++) m.put(keys[i], valuesA[i]);
    return m;
  }

  @TearDown(Level.Trial)
  public void tearDown() throws IOException {
    if (medium.equals("none")) return;
    Pools.printStats("writes " + medium + " end");
    floorChannel.close();
    Files.deleteIfExists(floorFile);
  }

  /**
   * The medium's floor: an 8-byte read-modify-write in a mapped file of the same kind, made
   * durable as the medium makes a replica store durable: on file an msync of that page
   * ({@code MappedByteBuffer.force(index, 8)}), on shm a full fence.
   */
  @Benchmark
  @OperationsPerInvocation(OPS)
  public void durableFloor() {
    MappedByteBuffer f = floor;
    boolean file = medium.equals("file");
    for (int k = 0; k < OPS; k++) {
      f.putLong(4096, f.getLong(4096) + 1);
      if (file) f.force(4096, 8);
      else VarHandle.fullFence();
    }
  }

  // putfield int

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void putInt_plain() {
    Cell c = cellPlain;
    for (int k = 0; k < OPS; k++) c.i = c.i + 1;
  }

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void putInt_persistent() {
    Cell c = cellPersistent;
    for (int k = 0; k < OPS; k++) c.i = c.i + 1;
  }

  // putfield long

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void putLong_plain() {
    Cell c = cellPlain;
    for (int k = 0; k < OPS; k++) c.l = c.l + 3;
  }

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void putLong_persistent() {
    Cell c = cellPersistent;
    for (int k = 0; k < OPS; k++) c.l = c.l + 3;
  }

  // putfield reference (alternating between two objects, both persistent already)

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void putRef_plain() {
    Cell c = cellPlain;
    for (int k = 0; k < OPS; k++) c.r = c.r == a ? b : a;
  }

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void putRef_persistent() {
    Cell c = cellPersistent;
    for (int k = 0; k < OPS; k++) c.r = c.r == a ? b : a;
  }

  // int[] element store

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void storeIntArray_plain() {
    int[] x = intsPlain;
    for (int k = 0; k < OPS; k++) x[k] = x[k] + 1;
  }

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void storeIntArray_persistent() {
    int[] x = intsPersistent;
    for (int k = 0; k < OPS; k++) x[k] = x[k] + 1;
  }

  // Object[] element store

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void storeRefArray_plain() {
    Object[] x = refsPlain;
    for (int k = 0; k < OPS; k++) x[k] = x[k] == a ? b : a;
  }

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void storeRefArray_persistent() {
    Object[] x = refsPersistent;
    for (int k = 0; k < OPS; k++) x[k] = x[k] == a ? b : a;
  }

  // HashMap.put replacing an existing key's value (a get decides which of two values)

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void hashMapPut_plain() {
    HashMap<Integer, Integer> m = mapPlain;
    for (int k = 0; k < OPS; k++) m.put(keys[k], m.get(keys[k]) == valuesA[k] ? valuesB[k] : valuesA[k]);
  }

  @Benchmark
  @OperationsPerInvocation(OPS)
  public void hashMapPut_persistent() {
    HashMap<Integer, Integer> m = mapPersistent;
    for (int k = 0; k < OPS; k++) m.put(keys[k], m.get(keys[k]) == valuesA[k] ? valuesB[k] : valuesA[k]);
  }
}
