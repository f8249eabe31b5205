package kioku.persist.agent;

import java.util.ArrayList;
import java.util.List;

/**
 * The agent options the instrumentation reads from the agent's argument string
 * ({@code key=value} pairs separated by commas). Other keys belong to the runtime and are
 * ignored here; the whole string is passed on to it.
 *
 * @param excluded internal-name prefixes not to instrument ({@code instrument.exclude=a;b})
 * @param verbose one stderr line per transformed class ({@code instrument.verbose=true})
 * @param cache where rewritten JDK classes are kept between starts ({@code instrument.cache=DIR}
 *     or {@code off}; null: the default directory, see {@link TransformCache})
 */
record InstrumentOptions(List<String> excluded, boolean verbose, String cache) {
  static final InstrumentOptions DEFAULT = new InstrumentOptions(List.of(), false, null);

  static InstrumentOptions parse(String agentArgs) {
    List<String> excluded = new ArrayList<>();
    boolean verbose = false;
    String cache = null;
    if (agentArgs != null) {
      for (String pair : agentArgs.split(",")) {
        int eq = pair.indexOf('=');
        String key = (eq < 0 ? pair : pair.substring(0, eq)).trim();
        String value = eq < 0 ? "" : pair.substring(eq + 1).trim();
        switch (key) {
          case "instrument.exclude" -> {
            for (String p : value.split(";")) {
              // Accept binary names (dots) too: prefixes are matched on internal names.
              if (!p.isBlank()) excluded.add(p.trim().replace('.', '/'));
            }
          }
          case "instrument.verbose" -> verbose = value.isEmpty() || Boolean.parseBoolean(value);
          case "instrument.cache" -> cache = value.isEmpty() ? null : value;
          default -> {}
        }
      }
    }
    return new InstrumentOptions(List.copyOf(excluded), verbose, cache);
  }
}
