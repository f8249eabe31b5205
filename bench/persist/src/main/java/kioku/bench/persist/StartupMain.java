package kioku.bench.persist;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import kioku.persist.KiokuPersist;

/**
 * Start-up cost (run.sh, part "startup"): a program that puts three entries in a HashMap and
 * prints one line; with {@code pool DIR}, it also creates a new pool in DIR and makes the map
 * persistent, as a program's first start with kioku would.
 */
public final class StartupMain {
  private StartupMain() {}

  public static void main(String[] args) {
    Map<String, Integer> m = new HashMap<>();
    m.put("a", 1);
    m.put("b", 2);
    m.put("c", 3);
    if (args.length == 2 && args[0].equals("pool")) {
      KiokuPersist.open(Path.of(args[1], "startup-" + ProcessHandle.current().pid() + ".pool"), "shm");
      StartupRoots.map = m;
      KiokuPersist.close();
    }
    System.out.println("ok " + m.size());
  }
}
