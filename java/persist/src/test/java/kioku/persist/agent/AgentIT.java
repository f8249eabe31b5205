package kioku.persist.agent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Runs JVMs with the packaged agent: the workload's output must not change, the JDK classes
 * must be retransformed (and pass the verifier, which is off for boot classes by default, so
 * it is turned on here), and a class that cannot be instrumented is reported in one line.
 */
class AgentIT {
  private static final String WORKLOAD = "kioku.persisttest.agent.CollectionsWorkload";
  private static final String VERIFY_BOOT_CLASSES =
      "-XX:+UnlockDiagnosticVMOptions -XX:+BytecodeVerificationLocal";

  @TempDir Path tmp;

  record Run(int exit, List<String> out, List<String> err) {
    /** The agent's own stderr lines (the JVM may add a CDS warning of its own). */
    List<String> agentLines() {
      return err.stream().filter(l -> l.startsWith("kioku-persist:")).toList();
    }
  }

  /**
   * Set by the pom for failsafe. A run of surefire selected by a pattern that matches this
   * class too (-Dtest=kioku.persist.agent.**) has no agent jar yet: skip there.
   */
  private static String property(String name) {
    String v = System.getProperty(name);
    assumeTrue(v != null, name + " is set for failsafe only");
    return v;
  }

  private Run java(List<String> jvmArgs, String classpath, String main, String... args)
      throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>();
    cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    cmd.addAll(jvmArgs);
    cmd.add("-cp");
    cmd.add(classpath);
    cmd.add(main);
    cmd.addAll(List.of(args));
    Path out = Files.createTempFile(tmp, "out", ".txt");
    Path err = Files.createTempFile(tmp, "err", ".txt");
    Process p = new ProcessBuilder(cmd)
        .redirectOutput(out.toFile())
        .redirectError(err.toFile())
        .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
        .start();
    if (!p.waitFor(180, TimeUnit.SECONDS)) {
      p.destroyForcibly().waitFor();
      throw new AssertionError("timed out: " + cmd);
    }
    return new Run(p.exitValue(), Files.readAllLines(out, StandardCharsets.UTF_8),
        Files.readAllLines(err, StandardCharsets.UTF_8));
  }

  private static List<String> agent(String options) {
    String jar = property("kioku.agent.jar");
    List<String> args = new ArrayList<>(List.of(VERIFY_BOOT_CLASSES.split(" ")));
    args.add("-javaagent:" + jar + (options.isEmpty() ? "" : "=" + options));
    return args;
  }

  @Test
  void theWorkloadComputesTheSameWithTheAgentAndTheJdkClassesAreInstrumented()
      throws Exception {
    String classes = property("kioku.test.classes");
    Run plain = java(List.of(), classes, WORKLOAD, "3");
    assertEquals(0, plain.exit(), plain.err().toString());
    assertEquals(1, plain.out().size(), plain.out().toString());
    assertTrue(plain.out().get(0).startsWith("checksum "));

    Run with = java(agent(""), classes, WORKLOAD, "3", "--report");
    assertEquals(0, with.exit(), with.err().toString());
    assertEquals(List.of(), with.agentLines());
    assertTrue(with.err().stream().noneMatch(l -> l.contains("Exception")), with.err().toString());
    assertEquals(plain.out().get(0), with.out().get(0));
    assertEquals(List.of(
        "agentActive true",
        "supported java.util.ArrayList true",
        "supported java.util.HashMap true",
        "supported java.util.TreeMap true",
        "supported java.util.LinkedList true",
        "supported java.util.ArrayDeque true",
        "supported java.util.Arrays true",
        "supported java.lang.String false",
        "supported java.util.HashMap$KeySet true",
        "supported java.util.TreeMap$EntrySet true",
        "persistent kioku.persisttest.agent.CollectionsWorkload$Node true",
        "intercepted Node true",
        "intercepted Collider true",
        "intercepted ArrayList true",
        "intercepted HashMap true",
        "intercepted Thread false",
        "intercepted Job false",
        "failed []"), with.out().subList(1, with.out().size()));
  }

  @Test
  void aClassThatCannotBeInstrumentedIsReportedInOneLineAndRunsUnchanged() throws Exception {
    String name = "kioku/persisttest/gen/Huge";
    Path dir = Files.createDirectories(tmp.resolve("gen/kioku/persisttest/gen"));
    Files.write(dir.resolve("Huge.class"), AgentPartsTest.hugeClass(name));
    String cp = property("kioku.test.classes") + File.pathSeparator + tmp.resolve("gen");
    Run run = java(
        agent("instrument.exclude=kioku.persisttest.agent.CollectionsWorkload$Node"),
        cp, "kioku.persisttest.agent.FailureProbe", "kioku.persisttest.gen.Huge");
    assertEquals(0, run.exit(), run.err().toString());
    assertEquals(1, run.agentLines().size(), run.err().toString());
    assertTrue(run.agentLines().get(0).startsWith(
        "kioku-persist: cannot instrument kioku.persisttest.gen.Huge: MethodTooLargeException"),
        run.agentLines().get(0));
    assertEquals(List.of(
        "fill 8999",
        "huge persistent false",
        "failed [kioku/persisttest/gen/Huge]",
        "node persistent false",
        "node intercepted false",
        "huge intercepted false"), run.out());
  }

  @Test
  void verboseNamesEachInstrumentedClass() throws Exception {
    Run run = java(agent("instrument.verbose=true"),
        property("kioku.test.classes"), WORKLOAD, "1");
    assertEquals(0, run.exit(), run.err().toString());
    List<String> lines = run.agentLines();
    assertTrue(lines.stream().anyMatch(l -> l.startsWith("kioku-persist: instrumented java.util.HashMap: ")));
    assertTrue(lines.stream().anyMatch(l -> l.startsWith(
        "kioku-persist: instrumented kioku.persisttest.agent.CollectionsWorkload (+replica word): ")));
    assertTrue(lines.stream().anyMatch(l -> l.startsWith(
        "kioku-persist: instrumented kioku.persisttest.agent.CollectionsWorkload$Node (+replica word): ")));
    assertTrue(lines.stream().allMatch(l -> l.startsWith("kioku-persist: instrumented ")), lines.toString());
  }

  @Test
  void theSecondStartTakesTheRewrittenJdkClassesFromTheCacheAndComputesTheSame()
      throws Exception {
    String classes = property("kioku.test.classes");
    Path dir = tmp.resolve("cache");
    Files.createDirectories(dir);
    Files.setPosixFilePermissions(dir,
        java.nio.file.attribute.PosixFilePermissions.fromString("rwx------"));
    // Another agent build's file, written long ago, is deleted; a recent one is kept.
    Path stale = Files.write(dir.resolve("jdk-0000000000000001.bin"), new byte[] {1});
    Files.setLastModifiedTime(stale, java.nio.file.attribute.FileTime.fromMillis(
        System.currentTimeMillis() - 30L * 24 * 3600 * 1000));
    Path recent = Files.write(dir.resolve("jdk-0000000000000002.bin"), new byte[] {2});
    String opt = "instrument.verbose=true,instrument.cache=" + dir;
    Run first = java(agent(opt), classes, WORKLOAD, "3", "--report");
    assertEquals(0, first.exit(), first.err().toString());
    assertTrue(Files.exists(recent));
    Files.delete(recent);
    List<String> files;
    try (var s = Files.list(dir)) {
      files = s.map(p -> p.getFileName().toString()).toList();
    }
    assertEquals(1, files.size(), files.toString());
    assertEquals("rwx------", java.nio.file.attribute.PosixFilePermissions.toString(
        Files.getPosixFilePermissions(dir)));
    Path file = dir.resolve(files.get(0));
    assertEquals("rw-------", java.nio.file.attribute.PosixFilePermissions.toString(
        Files.getPosixFilePermissions(file)));
    assertTrue(first.agentLines().stream().noneMatch(l -> l.endsWith("by an earlier start")));

    Run second = java(agent(opt), classes, WORKLOAD, "3", "--report");
    assertEquals(0, second.exit(), second.err().toString());
    assertEquals(first.out(), second.out());
    assertTrue(second.agentLines().contains(
        "kioku-persist: instrumented java.util.HashMap: as rewritten by an earlier start"),
        second.agentLines().toString());
    assertTrue(second.agentLines().stream().noneMatch(l -> l.startsWith(
        "kioku-persist: instrumented java.util.")
        && !l.endsWith("by an earlier start")), second.agentLines().toString());

    // A damaged file is not used: the classes are rewritten again and the file replaced.
    byte[] bytes = Files.readAllBytes(file);
    for (int i = 100; i < bytes.length; i += 997) bytes[i] ^= 0x55;
    Files.write(file, bytes);
    Run damaged = java(agent(opt), classes, WORKLOAD, "3", "--report");
    assertEquals(0, damaged.exit(), damaged.err().toString());
    assertEquals(first.out(), damaged.out());
    Run again = java(agent(opt), classes, WORKLOAD, "3", "--report");
    assertTrue(again.agentLines().contains(
        "kioku-persist: instrumented java.util.HashMap: as rewritten by an earlier start"),
        again.agentLines().toString());

    // A directory others may write is refused, with one warning.
    Path open = Files.createDirectories(tmp.resolve("open"));
    Files.setPosixFilePermissions(open,
        java.nio.file.attribute.PosixFilePermissions.fromString("rwxrwxrwx"));
    Run refused = java(agent("instrument.cache=" + open), classes, WORKLOAD, "1");
    assertEquals(0, refused.exit(), refused.err().toString());
    assertEquals(1, refused.agentLines().size(), refused.agentLines().toString());
    assertTrue(refused.agentLines().get(0).startsWith(
        "kioku-persist: warning: not caching rewritten JDK classes in "), refused.agentLines().get(0));
    try (var s = Files.list(open)) {
      assertEquals(0, s.count());
    }
  }

  @Test
  void aRuntimeStartFailureIsOneLineAndExitStatus2() throws Exception {
    Run run = java(agent("no.such.option=1"), property("kioku.test.classes"), WORKLOAD, "1");
    assertEquals(2, run.exit(), run.err().toString());
    assertEquals(List.of(), run.out());
    assertEquals(1, run.agentLines().size(), run.err().toString());
    assertTrue(run.agentLines().get(0).startsWith("kioku-persist: cannot start the runtime: "),
        run.agentLines().get(0));
    assertTrue(run.err().stream().noneMatch(l -> l.startsWith("\tat ")), run.err().toString());
  }
}
