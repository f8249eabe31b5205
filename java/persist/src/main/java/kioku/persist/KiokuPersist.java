package kioku.persist;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import kioku.persist.heap.HeapException;
import kioku.persist.heap.PersistentHeap;
import kioku.persist.pool.CrashMode;
import kioku.persist.pool.MediumChoice;
import kioku.persist.pool.Pool;
import kioku.persist.pool.PoolException;
import kioku.persist.pool.SimMedium;

/**
 * kioku's persistence by reachability for Java. Run the program with
 * {@code -javaagent:kioku-persist.jar=pool=PATH}, annotate static fields with
 * {@link DurableRoot}, and everything reachable from them survives crashes: when the program
 * starts again with the same pool, each root holds its recovered graph as soon as its class
 * is initialized.
 *
 * <p>Without {@code pool=} on the agent, call {@link #open(Path)} before the classes that
 * declare roots are initialized (or {@link #recover} after).
 */
public final class KiokuPersist {
  private KiokuPersist() {}

  private static volatile PersistentHeap heap;
  private static SimMedium sim;

  /** Called by the agent's premain with its argument string. */
  public static void startFromAgent(String agentArgs) {
    AgentOptions o = AgentOptions.parse(agentArgs);
    if (o.pool() == null) return;
    try {
      open(o);
    } catch (PersistenceException e) {
      System.err.println("kioku-persist: " + e.getMessage());
      Runtime.getRuntime().halt(2);
    }
  }

  /**
   * Opens (or creates) the pool at {@code path} on the best medium for it. Returns true if it
   * held persistent state, which the roots will receive.
   */
  public static boolean open(Path path) {
    return open(AgentOptions.parse("pool=" + path));
  }

  /** As {@link #open(Path)} on a chosen medium: auto, dax, file or shm. */
  public static boolean open(Path path, String medium) {
    return open(AgentOptions.parse("pool=" + path + ",medium=" + medium));
  }

  static synchronized boolean open(AgentOptions o) {
    if (heap != null) {
      throw new PersistenceException(
          "a persistent heap is already open (" + heap.pool().path() + "): one per JVM");
    }
    try {
      PersistentHeap h;
      if (o.medium().equals("sim")) {
        h = openSim(o);
      } else {
        MediumChoice choice = MediumChoice.parse(o.medium());
        if (Files.exists(o.pool())) {
          Pool pool = Pool.open(o.pool(), choice);
          // A heap pool with nothing ever committed in it: its creation was interrupted (the
          // pool file appears whole, the heap's sections come with the first commit). There is
          // no data to lose; make the heap.
          boolean unfinished = PersistentHeap.POOL_KIND.equals(pool.kind())
              && pool.epoch() == 0 && pool.sections().isEmpty();
          h = unfinished
              ? PersistentHeap.create(pool, o.heap(), o.roots())
              : PersistentHeap.open(pool, o.heap().isolationWaitMillis(), o.roots());
        } else {
          h = PersistentHeap.create(
              Pool.create(o.pool(), PersistentHeap.POOL_KIND, choice), o.heap(), o.roots());
        }
      }
      heap = h;
      kioku.persist.rt.Barrier.hooks = h;
      try {
        h.recoverEagerly(ClassLoader.getSystemClassLoader());
      } catch (HeapException | RuntimeException e) {
        // A heap that cannot be recovered is not left open (nor its pool locked), and the
        // barrier is off again (recovery may have turned it on).
        heap = null;
        h.close();
        kioku.persist.rt.Barrier.active = false;
        kioku.persist.rt.Barrier.hooks = null;
        throw e;
      }
      return h.hasData();
    } catch (PoolException | HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    } catch (IllegalArgumentException e) {
      throw new PersistenceException(e.getMessage(), e);
    }
  }

  /**
   * The simulated medium, for power-cut tests of whole programs: the pool file is the image;
   * at the cut point (sim.cutAt) the crash image is written over it and the JVM halts with
   * status 86; at a normal exit the drained state is written.
   */
  private static PersistentHeap openSim(AgentOptions o) throws PoolException, HeapException {
    Path path = o.pool();
    boolean exists = Files.exists(path);
    SimMedium m = exists ? SimMedium.load(path) : SimMedium.create(0);
    sim = m;
    CrashMode mode = crashMode(o.simMode());
    Runnable save =
        () -> {
          try {
            SimMedium.saveImage(path, m.crash(mode));
            Files.writeString(Path.of(path + ".points"), Long.toString(m.orderingPoints()));
          } catch (Exception e) {
            System.err.println("kioku-persist: saving the simulated image failed: " + e.getMessage());
          }
        };
    if (o.simCutAt() >= 0) {
      m.cutPowerAt(o.simCutAt());
      m.setOnCut(
          () -> {
            save.run();
            Runtime.getRuntime().halt(86);
          });
    }
    Runtime.getRuntime().addShutdownHook(new Thread(save, "kioku-sim-image"));
    return exists
        ? PersistentHeap.open(Pool.open(m), o.heap().isolationWaitMillis(), o.roots())
        : PersistentHeap.create(Pool.create(m, PersistentHeap.POOL_KIND), o.heap(), o.roots());
  }

  private static CrashMode crashMode(String s) {
    if (s.equals("drained")) return CrashMode.DRAINED_ONLY;
    if (s.equals("flushed")) return CrashMode.ALL_FLUSHED;
    if (s.startsWith("random:")) return CrashMode.random(Long.parseLong(s.substring(7)), true, true);
    throw new IllegalArgumentException("sim.mode=" + s + ": use drained, flushed or random:SEED");
  }

  /** True once a pool is open. */
  public static boolean isOpen() {
    return heap != null;
  }

  /** True if the open pool holds persistent state (a non-null root). */
  public static boolean hasData() {
    return heap().hasData();
  }

  /**
   * Rebuilds every root's graph now and assigns it to its field (initializing the classes
   * that declare them), using these class loaders first.
   */
  public static void recover(ClassLoader... loaders) {
    PersistentHeap h = heap();
    ClassLoader first = loaders.length > 0 ? loaders[0] : ClassLoader.getSystemClassLoader();
    try {
      Map<String, Object> graphs = h.recover(first);
      for (String root : graphs.keySet()) {
        String owner = root.substring(0, root.indexOf('#'));
        Class<?> c = null;
        for (ClassLoader l : loaders.length > 0 ? loaders : new ClassLoader[] {first}) {
          try {
            c = Class.forName(owner, true, l);
            break;
          } catch (ClassNotFoundException e) {
            // next loader
          }
        }
        if (c == null) {
          throw new PersistenceException(
              "cannot recover root " + root + ": class " + owner + " is not on the class path");
        }
        h.rootsDeclared(c); // a class initialized before the pool opened gets its roots now
      }
    } catch (HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    }
  }

  /**
   * Runs {@code action} as one failure-atomic section: after a crash, either all of its
   * stores to persistent objects are in the pool or none. (Each operation on a persistent
   * collection already is one.)
   *
   * <p>An exception that leaves {@code action} rolls it back: its stores to persistent objects
   * are undone in the pool and in the objects (stores to objects that are not persistent stay),
   * then the exception propagates. Nested blocks are part of the outermost one.
   *
   * <p>Isolation: hold the lock that protects the data around the block ({@code synchronized
   * (lock) { KiokuPersist.atomic(...); }}). A block that lets go of its lock before it ends
   * and whose data another thread then writes is tied to that thread's section: the other
   * section's end waits for this one, and they commit together; this block then cannot be
   * rolled back by an exception (its stores are already part of the other thread's). See
   * docs/persist.md, "Failure-atomic sections and threads".
   */
  public static void atomic(Runnable action) {
    // The heap the barrier writes to (the open one; in tests, whichever they installed).
    if (kioku.persist.rt.Barrier.hooks instanceof PersistentHeap h) {
      h.atomically(action);
    } else {
      action.run();
    }
  }

  /** Collects the persistent heap's garbage now. */
  public static void gc() {
    try {
      heap().collect();
    } catch (HeapException e) {
      throw new PersistenceException(e.getMessage(), e);
    }
  }

  /**
   * Compares the persistent graph reachable from {@code root} with its replicas; returns the
   * differences, one line each (empty when they agree). For tests and diagnostics.
   */
  public static java.util.List<String> verify(Object root) {
    return heap().verify(root);
  }

  public static PersistentHeap.Stats stats() {
    return heap().stats();
  }

  /** Closes the pool; persistent objects stay in memory but are no longer written through. */
  public static synchronized void close() {
    if (heap != null) {
      heap.close();
      heap = null;
    }
  }

  private static PersistentHeap heap() {
    PersistentHeap h = heap;
    if (h == null) {
      throw new PersistenceException(
          "no persistent heap is open: run with -javaagent:kioku-persist.jar=pool=PATH or call"
              + " KiokuPersist.open(path)");
    }
    return h;
  }
}
