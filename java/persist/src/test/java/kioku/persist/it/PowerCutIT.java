package kioku.persist.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/**
 * Runs kioku.examples.PowerCuts under the agent: power cuts at every ordering point, each cut
 * looked at in two exact images and kioku.powerCutSeeds random ones (default 4; make soak 16).
 */
class PowerCutIT {
  @Test
  void everyOrderingPointRecoversToBeforeOrAfter() throws Exception {
    Path dir = Files.createTempDirectory("kioku-cuts-");
    Path out = dir.resolve("out");
    Path err = dir.resolve("err");
    String seeds = String.valueOf(Integer.getInteger("kioku.powerCutSeeds", 4));
    Process p = Jvm.start("", out, err, "kioku.examples.PowerCuts", seeds);
    int status = Jvm.run(p, 900);
    String o = Files.readString(out);
    System.out.println(o);
    assertEquals(0, status, o + Files.readString(err));
    assertTrue(o.contains("ok make_persistent of a graph"), o);
    assertTrue(o.contains("ok HashMap.put (resize)"), o);
  }
}
