package kioku.persist.it;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Starts a JVM running a test program under the packaged agent. */
final class Jvm {
  private Jvm() {}

  static Path agentJar() {
    String jar = System.getProperty("kioku.agent.jar");
    if (jar == null || !Files.exists(Path.of(jar))) {
      throw new IllegalStateException("kioku.agent.jar is not set or missing: run through mvn verify");
    }
    return Path.of(jar);
  }

  static String testClasses() {
    return System.getProperty("kioku.test.classes");
  }

  /** java [-javaagent:jar=agentArgs] -cp testClasses main args..., stdout and stderr to files. */
  static Process start(String agentArgs, Path out, Path err, String main, String... args)
      throws IOException {
    return start(false, agentArgs, out, err, main, args);
  }

  /** As {@link #start}, with {@code first} on the class path before the test classes. */
  static Process startWithClassPath(
      String first, String agentArgs, Path out, Path err, String main, String... args)
      throws IOException {
    return start(true, first, agentArgs, out, err, main, args);
  }

  static Process start(
      boolean shortLived, String agentArgs, Path out, Path err, String main, String... args)
      throws IOException {
    return start(shortLived, null, agentArgs, out, err, main, args);
  }

  /** As above; {@code shortLived}: start fastest (C1 only), for JVMs killed within a second. */
  private static Process start(
      boolean shortLived, String first, String agentArgs, Path out, Path err, String main,
      String... args)
      throws IOException {
    List<String> cmd = new ArrayList<>();
    cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    cmd.add("-XX:+UseSerialGC");
    if (shortLived) cmd.add("-XX:TieredStopAtLevel=1");
    cmd.add("-Xss1m");
    if (agentArgs != null) {
      cmd.add("-javaagent:" + agentJar() + (agentArgs.isEmpty() ? "" : "=" + agentArgs));
    }
    cmd.add("-cp");
    cmd.add(first == null ? testClasses() : first + java.io.File.pathSeparator + testClasses());
    cmd.add(main);
    cmd.addAll(List.of(args));
    ProcessBuilder pb = new ProcessBuilder(cmd);
    pb.redirectOutput(out.toFile());
    pb.redirectError(err.toFile());
    return pb.start();
  }

  /** Runs to completion (or fails after the timeout); returns the exit status. */
  static int run(Process p, long timeoutSeconds) throws InterruptedException {
    if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new AssertionError("child JVM did not finish in " + timeoutSeconds + " s");
    }
    return p.exitValue();
  }
}
