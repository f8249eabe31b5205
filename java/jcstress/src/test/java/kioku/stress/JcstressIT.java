package kioku.stress;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.openjdk.jcstress.annotations.Expect;
import org.openjdk.jcstress.infra.Status;
import org.openjdk.jcstress.infra.collectors.DiskReadCollector;
import org.openjdk.jcstress.infra.collectors.InProcessCollector;
import org.openjdk.jcstress.infra.collectors.TestResult;
import org.openjdk.jcstress.infra.grading.GradingResult;
import org.openjdk.jcstress.infra.grading.TestGrading;
import org.openjdk.jcstress.infra.runners.TestList;

/**
 * Runs the jcstress tests of this module (from the packaged uber-jar, every forked JVM with the
 * kioku-persist agent) and fails if any test has a FORBIDDEN outcome, an error, or did not run.
 *
 * <p>System properties (given with {@code -D} on the Maven command line, which passes them on):
 *
 * <ul>
 *   <li>{@code jcstress.mode}: {@code build} (the default: a short run for {@code mvn verify},
 *       one fork per test, about a minute on 2 cores) or a jcstress preset ({@code sanity, quick, default, tough,
 *       stress}) run as jcstress defines it, in every JVM configuration it detects
 *   <li>{@code jcstress.args}: more jcstress options (e.g. {@code -time 1000 -iters 10}); in
 *       {@code build} mode they replace the build's values of the same options
 *   <li>{@code jcstress.tests}: a regular expression selecting tests
 *   <li>{@code jcstress.cpus}: CPUs for jcstress ({@code -c}; default 2, or 1 on one CPU)
 *   <li>{@code jcstress.budget}: minutes before the run is stopped and fails (0: no limit;
 *       empty: 10 for {@code build}, none otherwise)
 * </ul>
 *
 * <p>The full jcstress output is in {@code target/jcstress/jcstress.log}, its reports in
 * {@code target/jcstress/results/}, and the summary printed here in
 * {@code target/jcstress/summary.txt}.
 */
class JcstressIT {
  /** jcstress options of the short build run. */
  private static final List<String> BUILD_OPTIONS =
      List.of(
          "-m", "quick",
          "-time", "200",
          "-iters", "2",
          // No forks with the JIT's stress options: they double the forks (a JVM and the agent's
          // start each) and find compiler reorderings, while these tests look for races in
          // kioku's own locking; make soak runs jcstress's default preset, which has them.
          "-fsm", "0",
          // one compilation mode per fork instead of every split of actors over C1/C2
          "-sc", "false",
          // No pre-touch of each fork's 256 MB heap: it steadies jcstress's timing, not the
          // interleavings these tests look for, and cost a fork 0.5-1 s of system time (32
          // forks: 16 tests in the two biased-locking modes jcstress adds); make soak's preset
          // pre-touches.
          "-pth", "false",
          // Small epochs, so that an iteration ends near its 200 ms: every state costs a
          // persistent-heap registration, and jcstress's default 40 x 256 states overrun it.
          "-strideSize", "64",
          "-strideCount", "4");

  /** jcstress's own classes are the harness, not the code under test: left uninstrumented. */
  private static final String AGENT_OPTIONS = "instrument.exclude=org.openjdk.jcstress;joptsimple;com.sun.jna";

  @Test
  void stressTestsHaveNoForbiddenOrErrorOutcomes() throws Exception {
    Path jar = existing("kioku.jcstress.jar");
    Path agent = existing("kioku.agent.jar");
    Path work = Path.of(required("kioku.jcstress.work"));
    String mode = property("jcstress.mode", "build");
    boolean build = mode.equals("build");
    String tests = property("jcstress.tests", "kioku\\.stress\\..*");
    String budgetText = property("jcstress.budget", build ? "10" : "0");
    long budgetMinutes = Long.parseLong(budgetText);

    emptyDirectory(work);
    // A snapshot of the agent: the forked JVMs start over minutes, and the jar may be rebuilt.
    Path agentCopy = work.resolve("kioku-persist.jar");
    Files.copy(agent, agentCopy, StandardCopyOption.REPLACE_EXISTING);

    List<String> cmd = new ArrayList<>();
    cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    cmd.add("-cp");
    cmd.add(jar.toString());
    cmd.add("org.openjdk.jcstress.Main");
    String javaagent = "-javaagent:" + agentCopy + "=" + AGENT_OPTIONS;
    List<String> extra = new ArrayList<>();
    for (String a : property("jcstress.args", "").trim().split("\\s+")) if (!a.isEmpty()) extra.add(a);
    if (build) {
      // the build's options, except those jcstress.args gives
      for (int i = 0; i < BUILD_OPTIONS.size(); i += 2) {
        if (!extra.contains(BUILD_OPTIONS.get(i))) cmd.addAll(BUILD_OPTIONS.subList(i, i + 2));
      }
      cmd.add("-jvmArgs"); // one JVM configuration: the agent (jcstress adds ±BiasedLocking)
      cmd.add(javaagent);
    } else {
      cmd.add("-m");
      cmd.add(mode);
      cmd.add("-jvmArgsPrepend"); // the agent in every configuration jcstress detects
      cmd.add(javaagent);
    }
    cmd.add("-c");
    cmd.add(property("jcstress.cpus", Runtime.getRuntime().availableProcessors() > 1 ? "2" : "1"));
    cmd.add("-t");
    cmd.add(tests);
    cmd.add("-r");
    cmd.add(work.resolve("results").toString());
    cmd.addAll(extra);

    Path log = work.resolve("jcstress.log");
    System.out.println("jcstress: " + String.join(" ", cmd));
    System.out.println("jcstress: output in " + log);
    long start = System.nanoTime();
    int exit = run(cmd, work, log, budgetMinutes);
    long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - start);

    Map<String, Summary> results = readResults(work);
    List<String> problems = new ArrayList<>();
    Pattern selected = Pattern.compile(tests);
    for (String name : TestList.tests()) {
      if (selected.matcher(name).find() && !results.containsKey(name)) {
        problems.add(name + ": did not run");
      }
    }
    StringBuilder report = new StringBuilder();
    report.append("jcstress mode ").append(mode).append(", ").append(seconds).append(" s, exit ")
        .append(exit).append('\n');
    int passed = 0;
    int failed = 0;
    for (Summary s : results.values()) {
      report.append(s.describe());
      List<String> own = s.problems();
      if (own.isEmpty()) {
        passed++;
      } else {
        failed++;
        problems.addAll(own);
      }
    }
    if (exit != 0 && problems.isEmpty()) problems.add("jcstress exited with status " + exit + " (see " + log + ")");
    if (results.isEmpty()) problems.add("no test results (see " + log + ")");
    failed += (int) problems.stream().filter(p -> p.endsWith(": did not run")).count();
    report.append("jcstress: ").append(passed).append(" passed, ").append(failed).append(" failed\n");
    Files.writeString(work.resolve("summary.txt"), report);
    System.out.print(report);
    if (!problems.isEmpty()) {
      fail("jcstress found problems (details in " + work + "):\n  " + String.join("\n  ", problems));
    }
    assertTrue(passed > 0, "no jcstress test passed");
  }

  /** Runs jcstress, its output to {@code log}; stops it (and its forks) past the budget. */
  private static int run(List<String> cmd, Path dir, Path log, long budgetMinutes) throws Exception {
    ProcessBuilder pb = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true);
    Process p = pb.start();
    Thread pump =
        new Thread(
            () -> {
              try (BufferedReader in =
                      new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
                  PrintWriter out = new PrintWriter(Files.newBufferedWriter(log, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                  out.println(line);
                  if (line.startsWith("[FAILED]") || line.startsWith("[ERROR]")) System.out.println(line);
                }
              } catch (IOException e) {
                // the process went away; what was read is in the log
              }
            },
            "jcstress-output");
    pump.setDaemon(true);
    pump.start();
    boolean done = budgetMinutes <= 0 ? waitFor(p) : p.waitFor(budgetMinutes, TimeUnit.MINUTES);
    if (!done) {
      p.descendants().forEach(ProcessHandle::destroyForcibly);
      p.destroyForcibly();
      p.waitFor(30, TimeUnit.SECONDS);
      pump.join(5000);
      fail("jcstress did not finish within " + budgetMinutes + " minutes (jcstress.budget); output in " + log);
    }
    pump.join(10_000);
    return p.exitValue();
  }

  private static boolean waitFor(Process p) throws InterruptedException {
    p.waitFor();
    return true;
  }

  /** The results jcstress wrote (jcstress-results-*.bin.gz in its working directory), by test. */
  private static Map<String, Summary> readResults(Path work) throws Exception {
    Map<String, Summary> byTest = new TreeMap<>();
    List<Path> blobs;
    try (Stream<Path> s = Files.list(work)) {
      blobs = s.filter(f -> f.getFileName().toString().matches("jcstress-results-.*\\.bin\\.gz")).toList();
    }
    for (Path blob : blobs) {
      InProcessCollector c = new InProcessCollector();
      DiskReadCollector reader = new DiskReadCollector(blob.toString(), c);
      try {
        reader.dump();
      } finally {
        reader.close();
      }
      for (TestResult r : c.getTestResults()) {
        byTest.computeIfAbsent(r.getName(), Summary::new).add(r);
      }
    }
    return byTest;
  }

  /** One test's results over all its forks and configurations. */
  private static final class Summary {
    final String name;
    final Map<String, Long> counts = new TreeMap<>();
    final Map<String, Expect> expects = new TreeMap<>();
    final List<String> problems = new ArrayList<>();
    int forks;

    Summary(String name) {
      this.name = name;
    }

    void add(TestResult r) {
      forks++;
      String config = r.getConfig() == null ? "?" : String.join(" ", r.getConfig().jvmArgs);
      if (r.status() != Status.NORMAL) {
        StringBuilder why = new StringBuilder(name + ": " + r.status() + " in [" + config + "]");
        for (String m : r.getMessages()) why.append("\n      ").append(m);
        int shown = 0;
        for (String e : r.getVmErr()) {
          if (e.contains("Sharing is only supported")) continue;
          if (shown++ == 20) break;
          why.append("\n      ").append(e);
        }
        problems.add(why.toString());
      }
      TestGrading g = r.grading();
      for (GradingResult gr : g.gradingResults.values()) {
        if (gr.count == 0) continue;
        counts.merge(gr.id, gr.count, Long::sum);
        expects.put(gr.id, gr.expect);
      }
      if (!g.isPassed) {
        for (String m : g.failureMessages) problems.add(name + ": " + m + " in [" + config + "]");
        if (g.failureMessages.isEmpty()) problems.add(name + ": failed in [" + config + "]");
      }
    }

    List<String> problems() {
      List<String> all = new ArrayList<>(problems);
      if (counts.isEmpty() && problems.isEmpty()) all.add(name + ": no samples");
      return all;
    }

    String describe() {
      StringBuilder b = new StringBuilder();
      b.append(problems().isEmpty() ? "  [OK]     " : "  [FAILED] ").append(name).append(" (")
          .append(forks).append(forks == 1 ? " fork)\n" : " forks)\n");
      counts.entrySet().stream()
          .sorted(Map.Entry.<String, Long>comparingByValue(Comparator.reverseOrder()))
          .forEach(e ->
              b.append(String.format("      %12d  %-10s  %s%n", e.getValue(), expects.get(e.getKey()), e.getKey())));
      return b.toString();
    }
  }

  private static String property(String key, String dflt) {
    String v = System.getProperty(key);
    return v == null || v.isBlank() ? dflt : v.trim();
  }

  private static String required(String key) {
    String v = System.getProperty(key);
    if (v == null || v.isBlank()) throw new IllegalStateException(key + " is not set: run through mvn verify");
    return v;
  }

  private static Path existing(String key) {
    Path p = Path.of(required(key));
    if (!Files.isRegularFile(p)) {
      throw new IllegalStateException(key + "=" + p + " does not exist: build with `cd java && mvn verify`");
    }
    return p;
  }

  private static void emptyDirectory(Path dir) throws IOException {
    if (Files.isDirectory(dir)) {
      try (Stream<Path> s = Files.walk(dir)) {
        for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
          if (!p.equals(dir)) Files.delete(p);
        }
      }
    }
    Files.createDirectories(dir);
  }
}
