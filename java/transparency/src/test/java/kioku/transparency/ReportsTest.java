package kioku.transparency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The report reading and comparison that {@link TransparencyIT} relies on. */
class ReportsTest {
  private static final String HEAD = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"JUnit Jupiter\" tests=\"4\">\n";

  private static Path report(Path dir, String name, String cases) throws IOException {
    Files.createDirectories(dir);
    Files.writeString(dir.resolve(name), HEAD + cases + "</testsuite>\n");
    return dir;
  }

  private static final String FOUR =
      "<testcase name=\"a()\" classname=\"p.ATest\" time=\"0\"/>\n"
          + "<testcase name=\"b()\" classname=\"p.ATest\" time=\"0\"><failure message=\"expected: &lt;1&gt;\""
          + " type=\"org.opentest4j.AssertionFailedError\"><![CDATA[org.opentest4j.AssertionFailedError: expected: <1>\n"
          + "\tat p.ATest.b(ATest.java:9)\n]]></failure></testcase>\n"
          + "<testcase name=\"c()\" classname=\"p.ATest\" time=\"0\"><skipped><![CDATA[assumption]]></skipped></testcase>\n"
          + "<testcase name=\"c()\" classname=\"p.ATest\" time=\"0\"><error message=\"boom\" type=\"java.lang.IllegalStateException\">"
          + "<![CDATA[java.lang.IllegalStateException: boom]]></error><system-out>x</system-out></testcase>\n";

  @Test
  void readsEachStatusAndNumbersRepeatedIds(@TempDir Path tmp) throws IOException {
    Map<String, Reports.Outcome> r = Reports.read(report(tmp, "TEST-junit-jupiter.xml", FOUR));
    assertEquals(
        List.of(
            "junit-jupiter p.ATest a()",
            "junit-jupiter p.ATest b()",
            "junit-jupiter p.ATest c()",
            "junit-jupiter p.ATest c() #2"),
        List.copyOf(r.keySet()));
    assertEquals(Reports.Status.PASSED, r.get("junit-jupiter p.ATest a()").status());
    assertEquals(Reports.Status.FAILED, r.get("junit-jupiter p.ATest b()").status());
    assertEquals("expected: <1>", r.get("junit-jupiter p.ATest b()").message());
    assertTrue(r.get("junit-jupiter p.ATest b()").detail().contains("ATest.java:9"));
    assertEquals(Reports.Status.SKIPPED, r.get("junit-jupiter p.ATest c()").status());
    assertEquals(Reports.Status.ERROR, r.get("junit-jupiter p.ATest c() #2").status());
    assertEquals("4 tests: 1 passed, 1 failed, 1 errors, 1 skipped", Reports.summary(r));
  }

  @Test
  void sameOutcomesCompareEqual(@TempDir Path tmp) throws IOException {
    Map<String, Reports.Outcome> a = Reports.read(report(tmp.resolve("a"), "TEST-junit-jupiter.xml", FOUR));
    Map<String, Reports.Outcome> b = Reports.read(report(tmp.resolve("b"), "TEST-junit-jupiter.xml", FOUR));
    assertEquals(List.of(), Reports.compare(a, b));
  }

  @Test
  void changedMissingAndExtraTestsAreDifferences(@TempDir Path tmp) throws IOException {
    Map<String, Reports.Outcome> base =
        Reports.read(
            report(
                tmp.resolve("a"),
                "TEST-junit-jupiter.xml",
                "<testcase name=\"a()\" classname=\"p.ATest\"/><testcase name=\"gone()\" classname=\"p.ATest\"/>"));
    Map<String, Reports.Outcome> agent =
        Reports.read(
            report(
                tmp.resolve("b"),
                "TEST-junit-jupiter.xml",
                "<testcase name=\"a()\" classname=\"p.ATest\"><error message=\"m\"><![CDATA[java.lang.VerifyError: m\n\tat x]]></error></testcase>"
                    + "<testcase name=\"new()\" classname=\"p.ATest\"/>"));
    List<Reports.Difference> d = Reports.compare(base, agent);
    assertEquals(3, d.size());
    assertEquals("junit-jupiter p.ATest a()", d.get(0).id());
    assertTrue(d.get(0).describe(5).contains("ERROR with the agent"), d.get(0).describe(5));
    assertTrue(d.get(0).describe(5).contains("VerifyError"), d.get(0).describe(5));
    assertNull(d.get(1).actual()); // gone()
    assertNull(d.get(2).expected()); // new()
    assertTrue(d.get(2).describe(5).contains("not run without the agent"));
  }

  @Test
  void aRunWithoutReportsIsAnError(@TempDir Path tmp) {
    assertThrows(IOException.class, () -> Reports.read(tmp));
  }
}
