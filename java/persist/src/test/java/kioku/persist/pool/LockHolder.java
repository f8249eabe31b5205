package kioku.persist.pool;

import java.nio.file.Path;

/** Child JVM for {@link PoolLockTest}: opens the pool, says so, holds it until stdin closes. */
public final class LockHolder {
  private LockHolder() {}

  public static void main(String[] args) throws Exception {
    try (Pool pool = Pool.open(Path.of(args[0]), MediumChoice.FILE)) {
      System.out.println("locked epoch=" + pool.epoch());
      System.out.flush();
      while (System.in.read() >= 0) {
        // Hold the pool until the parent closes our stdin (or kills us).
      }
    }
  }
}
