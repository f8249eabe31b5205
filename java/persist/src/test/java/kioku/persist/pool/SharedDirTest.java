package kioku.persist.pool;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A symbolic link planted at a pool's path in a directory others can write is not followed. */
class SharedDirTest {
  @TempDir Path dir;

  @Test
  void aLinkPlantedInASharedDirectoryIsRefusedAndItsTargetUntouched() throws Exception {
    Path victim = dir.resolve("victim.pool");
    try (Pool p = Pool.create(victim, "kioku.test", MediumChoice.AUTO)) {
      p.commit(new long[] {7});
    }
    byte[] before = Files.readAllBytes(victim);
    Path shared = Files.createDirectory(dir.resolve("shared"));
    // World-writable and sticky, like /tmp and /dev/shm.
    Files.setAttribute(shared, "unix:mode", 01777);
    Path link = Files.createSymbolicLink(shared.resolve("app.pool"), victim);
    PoolException open = assertThrows(PoolException.class,
        () -> Pool.open(link, MediumChoice.AUTO));
    assertEquals(PoolException.Reason.SYMLINK, open.reason(), open.getMessage());
    PoolException create = assertThrows(PoolException.class,
        () -> Pool.create(link, "kioku.test", MediumChoice.AUTO));
    assertEquals(PoolException.Reason.SYMLINK, create.reason(), create.getMessage());
    assertArrayEquals(before, Files.readAllBytes(victim), "the link's target changed");
    // A dangling link: nothing is created where it points.
    Path target = dir.resolve("made-by-kioku.pool");
    Files.delete(link);
    Files.createSymbolicLink(link, target);
    assertThrows(PoolException.class, () -> Pool.create(link, "kioku.test", MediumChoice.AUTO));
    assertFalse(Files.exists(target));
    // In one's own directory a link is followed as usual.
    Path own = Files.createSymbolicLink(dir.resolve("mine.pool"), victim);
    Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwx------"));
    try (Pool p = Pool.open(own, MediumChoice.AUTO)) {
      assertEquals(7, p.roots()[0]);
    }
  }
}
