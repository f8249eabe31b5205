package kioku.bench.persist;

import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.infra.ThreadParams;
import org.openjdk.jmh.annotations.TearDown;

/**
 * Target 4: make_persistent throughput. Each invocation assigns a freshly built graph (built
 * outside the timed part) to a {@code @DurableRoot}: its objects get replicas, are copied,
 * verified, flushed and drained, and the root is updated. The previous graph becomes garbage in
 * the pool, collected when the heap is 90% full, as in a program that keeps replacing its
 * state; GC runs are printed at the end. {@code copy} (run without the agent) is the baseline:
 * a deep copy of the same graph in ordinary memory.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
public class MakePersistentBench {
  @Param({"shm", "file"})
  public String medium;

  @Param({"items-1000", "items-10000", "longs-1048576"})
  public String shape;

  private Object fresh;
  private Object built;

  @Setup(Level.Trial)
  public void setup() {
    if (medium.equals("none")) {
      built = Graphs.build(shape);
      return;
    }
    Pools.open(medium);
    // Check the words this shape is reported as: replica bytes of one graph.
    long before = Pools.usedBytes();
    Roots.graph = Graphs.build(shape);
    long bytes = Pools.usedBytes() - before;
    System.out.println(
        "KIOKU-STATS make_persistent " + shape + " replicaBytes=" + bytes + " words=" + Graphs.words(shape));
    Pools.printStats("make_persistent " + medium + " " + shape + " start");
  }

  @Setup(Level.Invocation)
  public void build() {
    if (!medium.equals("none")) fresh = Graphs.build(shape);
  }

  @TearDown(Level.Trial)
  public void tearDown() {
    if (!medium.equals("none")) Pools.printStats("make_persistent " + medium + " " + shape + " end");
  }

  /** With {@code -t 2} (run.sh), the threads assign different roots. */
  @Benchmark
  public Object persist(ThreadParams thread) {
    if (thread.getThreadIndex() == 0) {
      Roots.graph = fresh;
    } else {
      Roots.graph2 = fresh;
    }
    return fresh;
  }

  @Benchmark
  public Object copy() {
    return Graphs.copy(built);
  }
}
