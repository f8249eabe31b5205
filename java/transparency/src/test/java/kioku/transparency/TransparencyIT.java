package kioku.transparency;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;
import org.junit.jupiter.api.Test;

/**
 * The agent's transparency on a real, well-tested library: Apache Commons Collections' own
 * unit tests (its published tests jar: some 11,600 tests, Jupiter ones and Guava-testlib suites
 * run by Vintage, over collections, iterators, reflection-driven bulk tests, cloning and
 * deserialization of forms written without the agent; all but the bloom filters') run four
 * with the JUnit console launcher, in these runs (make test: plain and persistent; make soak and
 * {@code -Dkioku.transparency.runs=plain,agent,agent-pool,persistent}: all four), and every
 * test's outcome must be the same in each run:
 *
 * <ol>
 *   <li>{@code plain}: no agent (the reference);
 *   <li>{@code agent}: {@code -javaagent:kioku-persist.jar}, so every class from the class path
 *       (the library, its tests, JUnit, Guava) is instrumented and java.util's collections are
 *       retransformed, but nothing is persistent;
 *   <li>{@code agent-pool}: the same with {@code pool=} (a pool in /dev/shm, nothing made
 *       persistent);
 *   <li>{@code persistent}: with a pool, and {@link PersistentLauncher} makes a durable root
 *       persistent before the tests, so every barrier of the run takes its slow path.
 * </ol>
 *
 * <p>A difference is reported with the test's message and stack trace. Failing library tests
 * are not a problem in themselves (the comparison is of sets); how many there are is printed.
 * Everything a run leaves is under {@code target/transparency/RUN/} (stdout.txt, stderr.txt,
 * reports/), and the summary in {@code target/transparency/summary.txt}.
 *
 * <p>System properties (set by the pom): kioku.agent.jar, kioku.transparency.classpath (a
 * file holding the library's class path), .launcher (the console launcher jar), .classes (this
 * module's classes), .tests.jar (the file name of the jar to scan), .work. Optional: kioku.transparency.include (a
 * class-name regex, to run a subset), .parallel (JVMs at once, default 2), .timeout (seconds
 * per run, default 900).
 */
class TransparencyIT {
  /** As the library's own build selects its test classes (its surefire includes/excludes). */
  private static final String INCLUDE = "^([a-z0-9_]+\\.)*[^.$]*Test$";

  private static final String EXCLUDE = "^([a-z0-9_]+\\.)*(Abstract[^.$]*|BulkTest|TestUtils)$";

  /**
   * Left out to keep the four runs within a few minutes on two cores: the bloom filters'
   * tests (437 of 12,081) are bit arithmetic on long[], not collections, and with persistence
   * active every one of their millions of array stores takes the barrier's slow path, which
   * makes them 20 times slower (over a minute alone).
   */
  private static final String EXCLUDE_SLOW =
      "^org\\.apache\\.commons\\.collections4\\.bloomfilter\\..*";

  /** Fewer than this in the full reference run means the set-up is broken, not the agent. */
  private static final int MIN_TESTS = 1000;

  private record Run(
      String name, List<String> jvmArgs, String main, boolean agent, boolean persistent) {}

  private record Result(
      Run run,
      Path dir,
      int exit,
      long millis,
      boolean timedOut,
      List<String> stderr,
      Map<String, Reports.Outcome> outcomes) {}

  private static Path prop(String key) {
    String v = System.getProperty(key);
    if (v == null) {
      throw new IllegalStateException("system property " + key + " is not set: run through mvn verify");
    }
    return Path.of(v);
  }

  @Test
  void libraryTestsHaveTheSameOutcomesWithTheAgent() throws Exception {
    Path work = prop("kioku.transparency.work");
    Path builtAgent = prop("kioku.agent.jar");
    assertTrue(
        Files.isRegularFile(builtAgent),
        builtAgent + " is missing: build it with `mvn -q -B package -pl persist -DskipTests` in java/");
    deleteTree(work);
    Files.createDirectories(work);
    // A private copy: rebuilding persist while the runs read the jar (another mvn in the same
    // tree) would crash them with SIGBUS in libzip, the boot class path being memory-mapped.
    Path agent = work.resolve("kioku-persist.jar");
    Files.copy(builtAgent, agent, StandardCopyOption.REPLACE_EXISTING);

    Path shm = Path.of("/dev/shm");
    Path pools =
        Files.createTempDirectory(
            Files.isDirectory(shm) && Files.isWritable(shm) ? shm : work, "kioku-transparency-");
    String javaagent = "-javaagent:" + agent;
    List<Run> runs =
        List.of(
            // Longest first: with two at a time the runs end at about the same time.
            new Run("persistent", List.of(javaagent + "=pool=" + pools.resolve("active.pool")),
                PersistentLauncher.class.getName(), true, true),
            new Run("agent", List.of(javaagent), Launch.class.getName(), true, false),
            new Run("agent-pool", List.of(javaagent + "=pool=" + pools.resolve("idle.pool")),
                Launch.class.getName(), true, false),
            new Run("plain", List.of(), Launch.class.getName(), false, false));

    List<String> chosen = List.of(System.getProperty("kioku.transparency.runs", "plain,persistent").split(","));
    if (!chosen.contains("plain")) fail("kioku.transparency.runs must include plain, the reference");
    runs = runs.stream().filter(r -> chosen.contains(r.name())).toList();
    int parallel = Integer.getInteger("kioku.transparency.parallel", 2);
    long timeout = Long.getLong("kioku.transparency.timeout", 900);
    Map<String, Result> results = new LinkedHashMap<>();
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, parallel));
    try {
      List<Future<Result>> futures = new ArrayList<>();
      for (Run r : runs) futures.add(pool.submit(() -> execute(r, work, timeout)));
      for (Future<Result> f : futures) {
        Result r = f.get();
        results.put(r.run().name(), r);
      }
    } finally {
      pool.shutdownNow();
      deleteTree(pools);
    }

    List<String> problems = new ArrayList<>();
    StringBuilder summary = new StringBuilder();
    summary.append("Apache Commons Collections' own tests (")
        .append(System.getProperty("kioku.transparency.tests.jar"))
        .append("), classes matching ").append(include())
        .append(", except ").append(EXCLUDE).append(" and ").append(EXCLUDE_SLOW).append('\n');
    Result plain = results.get("plain");
    for (String name : List.of("plain", "agent", "agent-pool", "persistent")) {
      Result r = results.get(name);
      if (r == null) continue;
      Run run = r.run();
      summary.append(String.format("%-11s exit %d, %5.1f s, %s%n", run.name(), r.exit(),
          r.millis() / 1000.0, r.outcomes() == null ? "no reports" : Reports.summary(r.outcomes())));
      problems.addAll(sanity(r));
    }
    int min = include().equals(INCLUDE) ? MIN_TESTS : 1; // a chosen subset may be small
    if (plain.outcomes() != null && plain.outcomes().size() < min) {
      problems.add("plain: only " + plain.outcomes().size() + " tests ran (expected at least " + min
          + "): the set-up is broken");
    }
    for (String name : List.of("agent", "agent-pool", "persistent")) {
      Result r = results.get(name);
      if (r == null) continue;
      Run run = r.run();
      if (plain.outcomes() == null || r.outcomes() == null) continue;
      if (r.exit() != plain.exit()) {
        problems.add(run.name() + ": the launcher exited " + r.exit() + ", without the agent "
            + plain.exit());
      }
      List<Reports.Difference> diffs = Reports.compare(plain.outcomes(), r.outcomes());
      summary.append(run.name()).append(" vs plain: ").append(diffs.size()).append(" differences\n");
      Path file = work.resolve(run.name() + "-differences.txt");
      Files.write(file, diffs.stream().map(d -> d.describe(Integer.MAX_VALUE)).toList());
      for (int i = 0; i < diffs.size() && i < 30; i++) {
        problems.add(run.name() + ": " + diffs.get(i).describe(12));
      }
      if (diffs.size() > 30) {
        problems.add(run.name() + ": " + (diffs.size() - 30) + " more differences in " + file);
      }
      r.stderr().stream().filter(l -> l.startsWith(PersistentLauncher.OK))
          .forEach(l -> summary.append(run.name()).append(": ").append(l).append('\n'));
      List<String> agentLines =
          r.stderr().stream().filter(l -> l.startsWith("kioku-persist:")).toList();
      if (!agentLines.isEmpty()) {
        summary.append(run.name()).append(" agent messages: ").append(agentLines.size()).append('\n');
        agentLines.stream().limit(20).forEach(l -> summary.append("  ").append(l).append('\n'));
      }
    }
    Files.writeString(work.resolve("summary.txt"), summary);
    System.out.print(summary);
    if (!problems.isEmpty()) {
      fail(problems.size() + " problems:\n" + String.join("\n", problems) + "\n" + summary);
    }
  }

  /** What each run must show besides its outcomes: it ran as intended and ended normally. */
  private static List<String> sanity(Result r) throws IOException {
    List<String> p = new ArrayList<>();
    String name = r.run().name();
    if (r.timedOut()) p.add(name + ": did not finish within its time limit; killed" + tail(r));
    if (r.exit() != 0 && r.exit() != 1) p.add(name + ": the launcher exited " + r.exit() + tail(r));
    try (Stream<Path> s = Files.list(r.dir())) {
      s.filter(f -> f.getFileName().toString().startsWith("hs_err"))
          .forEach(f -> p.add(name + ": the JVM crashed: " + f));
    }
    String probe = Launch.PROBE_PREFIX + r.run().agent();
    if (!r.stderr().contains(probe)) p.add(name + ": expected '" + probe + "' on stderr" + tail(r));
    if (r.run().persistent()) {
      if (r.stderr().stream().noneMatch(l -> l.startsWith(PersistentLauncher.OK))) {
        p.add(name + ": expected '" + PersistentLauncher.OK + "' on stderr" + tail(r));
      }
      r.stderr().stream()
          .filter(l -> l.startsWith(PersistentLauncher.BAD)
              || l.startsWith(PersistentLauncher.WRITER_FAILED))
          .forEach(l -> p.add(name + ": " + l));
    }
    if (r.outcomes() == null) p.add(name + ": wrote no reports" + tail(r));
    return p;
  }

  private static String tail(Result r) {
    List<String> e = r.stderr();
    return "; stderr ends:\n    " + String.join("\n    ", e.subList(Math.max(0, e.size() - 15), e.size()));
  }

  private static String include() {
    return System.getProperty("kioku.transparency.include", INCLUDE);
  }

  private static Result execute(Run run, Path work, long timeoutSeconds)
      throws IOException, InterruptedException {
    Path dir = work.resolve(run.name());
    Files.createDirectories(dir);
    List<String> library = libraryClassPath();
    Path testsJar = testsJar(library);
    extractResources(testsJar, dir.resolve("src/test/resources"));

    List<String> classPath = new ArrayList<>();
    classPath.add(prop("kioku.transparency.classes").toString());
    classPath.add(prop("kioku.transparency.launcher").toString());
    classPath.addAll(library);
    List<String> cmd = new ArrayList<>();
    cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    cmd.addAll(run.jvmArgs());
    cmd.add("-cp");
    cmd.add(String.join(java.io.File.pathSeparator, classPath));
    cmd.add(run.main());
    cmd.addAll(
        List.of(
            "execute",
            "--scan-classpath", testsJar.toString(),
            "--include-classname", include(),
            "--exclude-classname", EXCLUDE,
            "--exclude-classname", EXCLUDE_SLOW,
            "--reports-dir", dir.resolve("reports").toString(),
            "--details", "none",
            "--disable-banner",
            "--disable-ansi-colors"));
    Files.writeString(dir.resolve("command.txt"), String.join(" ", cmd) + "\n");

    ProcessBuilder pb = new ProcessBuilder(cmd).directory(dir.toFile());
    pb.redirectOutput(dir.resolve("stdout.txt").toFile());
    pb.redirectError(dir.resolve("stderr.txt").toFile());
    pb.environment().remove("JAVA_TOOL_OPTIONS");
    pb.environment().remove("_JAVA_OPTIONS");
    long start = System.nanoTime();
    Process p = pb.start();
    boolean finished = p.waitFor(timeoutSeconds, TimeUnit.SECONDS);
    if (!finished) {
      p.descendants().forEach(ProcessHandle::destroyForcibly);
      p.destroyForcibly();
      p.waitFor();
    }
    long millis = (System.nanoTime() - start) / 1_000_000;
    List<String> stderr = Files.readAllLines(dir.resolve("stderr.txt"), StandardCharsets.UTF_8);
    Map<String, Reports.Outcome> outcomes = null;
    Path reports = dir.resolve("reports");
    if (finished && Files.isDirectory(reports)) {
      try {
        outcomes = Reports.read(reports);
      } catch (IOException e) {
        outcomes = null;
      }
    }
    return new Result(run, dir, finished ? p.exitValue() : -1, millis, !finished, stderr, outcomes);
  }

  /** The library, its tests and their dependencies, as maven-dependency-plugin resolved them. */
  private static List<String> libraryClassPath() throws IOException {
    String cp = Files.readString(prop("kioku.transparency.classpath")).strip();
    return List.of(cp.split(java.util.regex.Pattern.quote(java.io.File.pathSeparator)));
  }

  /** The jar whose test classes run: the class path entry named kioku.transparency.tests.jar. */
  private static Path testsJar(List<String> library) {
    String name = System.getProperty("kioku.transparency.tests.jar");
    return library.stream()
        .map(Path::of)
        .filter(p -> p.getFileName().toString().equals(name))
        .findFirst()
        .orElseThrow(() -> new IllegalStateException(name + " is not on the library's class path"));
  }

  /**
   * The tests read their data (serialized forms of each collection, properties files) from
   * src/test/resources relative to the working directory, as in the library's own build.
   */
  private static void extractResources(Path jar, Path to) throws IOException {
    try (ZipFile zip = new ZipFile(jar.toFile())) {
      for (ZipEntry e : zip.stream().collect(Collectors.toList())) {
        String n = e.getName();
        if (e.isDirectory() || n.endsWith(".class") || n.startsWith("META-INF/")) continue;
        Path out = to.resolve(n).normalize();
        if (!out.startsWith(to)) continue;
        Files.createDirectories(out.getParent());
        try (InputStream in = zip.getInputStream(e)) {
          Files.copy(in, out, StandardCopyOption.REPLACE_EXISTING);
        }
      }
    }
  }

  private static void deleteTree(Path root) throws IOException {
    if (!Files.exists(root)) return;
    try (Stream<Path> s = Files.walk(root)) {
      for (Path p : s.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
    }
  }
}
