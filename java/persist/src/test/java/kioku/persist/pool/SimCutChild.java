package kioku.persist.pool;

import java.nio.file.Path;

/**
 * Child JVM for {@link PowerCutTest}: runs the workload on the simulator with the power cut at
 * ordering point {@code args[1]}; at the cut, saves the ALL_FLUSHED image to {@code args[0]} and
 * halts the JVM at once (exit 3), as a power failure would stop the program.
 */
public final class SimCutChild {
  private SimCutChild() {}

  public static void main(String[] args) throws Exception {
    Path image = Path.of(args[0]);
    long cut = Long.parseLong(args[1]);
    SimMedium sim = SimMedium.create(0);
    Pool pool = Workload.freshPool(sim);
    sim.cutPowerAt(cut);
    sim.setOnCut(() -> {
      try {
        SimMedium.saveImage(image, sim.crash(CrashMode.ALL_FLUSHED));
      } catch (PoolException e) {
        e.printStackTrace();
        Runtime.getRuntime().halt(2);
      }
      Runtime.getRuntime().halt(3);
    });
    Workload.run(pool, sim, Integer.parseInt(args[2]));
    System.exit(0); // the cut never came
  }
}
