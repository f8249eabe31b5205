package kioku.transparency;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.stream.Stream;
import javax.xml.parsers.DocumentBuilder;
import javax.xml.parsers.DocumentBuilderFactory;
import javax.xml.parsers.ParserConfigurationException;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.Node;
import org.w3c.dom.NodeList;
import org.xml.sax.SAXException;

/**
 * The per-test outcomes of one console-launcher run, read from its legacy XML reports
 * ({@code TEST-junit-jupiter.xml}, {@code TEST-junit-vintage.xml}...), and their comparison.
 */
final class Reports {
  private Reports() {}

  enum Status {
    PASSED,
    FAILED, // an assertion failed (<failure>)
    ERROR, // any other exception (<error>)
    SKIPPED // disabled, or aborted by an assumption (<skipped>)
  }

  /** One test's outcome; {@code detail} is the message and stack trace, if any. */
  record Outcome(Status status, String message, String detail) {}

  /**
   * Test id (engine, class name, test name) to outcome, in report order. An id that occurs
   * again (the legacy names need not be unique) gets {@code #2}, {@code #3}... appended.
   */
  static Map<String, Outcome> read(Path reportsDir) throws IOException {
    List<Path> files;
    try (Stream<Path> s = Files.list(reportsDir)) {
      files =
          s.filter(p -> p.getFileName().toString().matches("TEST-.*\\.xml")).sorted().toList();
    }
    if (files.isEmpty()) throw new IOException("no TEST-*.xml report in " + reportsDir);
    Map<String, Outcome> out = new LinkedHashMap<>();
    for (Path f : files) readFile(f, out);
    return out;
  }

  private static void readFile(Path file, Map<String, Outcome> out) throws IOException {
    String engine = file.getFileName().toString().replaceFirst("^TEST-", "").replaceFirst("\\.xml$", "");
    Document doc;
    try {
      DocumentBuilderFactory f = DocumentBuilderFactory.newInstance();
      f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
      DocumentBuilder b = f.newDocumentBuilder();
      doc = b.parse(file.toFile());
    } catch (ParserConfigurationException | SAXException e) {
      throw new IOException("cannot read " + file + ": " + e.getMessage(), e);
    }
    NodeList cases = doc.getElementsByTagName("testcase");
    for (int i = 0; i < cases.getLength(); i++) {
      Element tc = (Element) cases.item(i);
      String id = engine + " " + tc.getAttribute("classname") + " " + tc.getAttribute("name");
      String unique = id;
      for (int n = 2; out.containsKey(unique); n++) unique = id + " #" + n;
      out.put(unique, outcome(tc));
    }
  }

  private static Outcome outcome(Element tc) {
    for (Node c = tc.getFirstChild(); c != null; c = c.getNextSibling()) {
      if (!(c instanceof Element e)) continue;
      Status s =
          switch (e.getTagName()) {
            case "failure" -> Status.FAILED;
            case "error" -> Status.ERROR;
            case "skipped" -> Status.SKIPPED;
            default -> null;
          };
      if (s != null) return new Outcome(s, e.getAttribute("message"), e.getTextContent().strip());
    }
    return new Outcome(Status.PASSED, "", "");
  }

  static Map<Status, Integer> counts(Map<String, Outcome> outcomes) {
    Map<Status, Integer> c = new EnumMap<>(Status.class);
    for (Status s : Status.values()) c.put(s, 0);
    for (Outcome o : outcomes.values()) c.merge(o.status(), 1, Integer::sum);
    return c;
  }

  /** "12081 tests: 12013 passed, 0 failed, 0 errors, 68 skipped". */
  static String summary(Map<String, Outcome> outcomes) {
    Map<Status, Integer> c = counts(outcomes);
    return outcomes.size() + " tests: " + c.get(Status.PASSED) + " passed, "
        + c.get(Status.FAILED) + " failed, " + c.get(Status.ERROR) + " errors, "
        + c.get(Status.SKIPPED) + " skipped";
  }

  /** One test whose status differs (an outcome is null where the test did not run). */
  record Difference(String id, Outcome expected, Outcome actual) {
    String describe(int maxDetailLines) {
      return id + ": " + show(expected, "without the agent", maxDetailLines) + "; "
          + show(actual, "with the agent", maxDetailLines);
    }

    private static String show(Outcome o, String when, int maxDetailLines) {
      if (o == null) return "not run " + when;
      String s = o.status() + " " + when;
      if (o.status() == Status.PASSED) return s;
      String detail = o.detail().lines().limit(maxDetailLines).reduce((a, b) -> a + "\n      " + b).orElse("");
      return s + (detail.isEmpty() ? " (" + o.message() + ")" : ":\n      " + detail);
    }
  }

  /** The tests whose status is not the same in both runs, by id. */
  static List<Difference> compare(Map<String, Outcome> expected, Map<String, Outcome> actual) {
    TreeSet<String> ids = new TreeSet<>(expected.keySet());
    ids.addAll(actual.keySet());
    List<Difference> diffs = new ArrayList<>();
    for (String id : ids) {
      Outcome e = expected.get(id);
      Outcome a = actual.get(id);
      if (e == null || a == null || e.status() != a.status()) diffs.add(new Difference(id, e, a));
    }
    return diffs;
  }
}
