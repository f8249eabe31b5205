package kioku.transparency;

import java.util.Arrays;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.platform.engine.FilterResult;
import org.junit.platform.engine.TestDescriptor;
import org.junit.platform.engine.support.descriptor.MethodSource;
import org.junit.platform.launcher.PostDiscoveryFilter;

/**
 * Leaves out of a run the library's test methods named in the system property {@value
 * #PROPERTY} (comma-separated {@code fully.qualified.Class#method}); the JUnit launcher finds
 * it through {@code META-INF/services}. {@link TransparencyIT} gives every run of a comparison
 * the same list, so the runs still run the same tests: in make test, the few that only wait on
 * the clock (their sleeps are the same with and without the agent); make soak leaves none out.
 */
public final class SkipTests implements PostDiscoveryFilter {
  /** The system property naming the methods left out. */
  public static final String PROPERTY = "kioku.transparency.skip";

  private final Set<String> skipped;

  public SkipTests() {
    skipped =
        Arrays.stream(System.getProperty(PROPERTY, "").split(","))
            .map(String::strip)
            .filter(s -> !s.isEmpty())
            .collect(Collectors.toUnmodifiableSet());
  }

  @Override
  public FilterResult apply(TestDescriptor test) {
    boolean skip =
        test.getSource()
            .filter(MethodSource.class::isInstance)
            .map(s -> (MethodSource) s)
            .map(m -> skipped.contains(m.getClassName() + "#" + m.getMethodName()))
            .orElse(false);
    return skip
        ? FilterResult.excluded("left out by -D" + PROPERTY)
        : FilterResult.included("not named in -D" + PROPERTY);
  }
}
