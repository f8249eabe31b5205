package kioku.persist;

import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import kioku.persist.heap.PersistentHeap;
import kioku.persist.heap.RootNames;

/**
 * The agent's argument string: {@code key=value} pairs separated by commas, e.g.
 * {@code pool=data.pool,medium=shm}. Keys of the instrumentation ({@code instrument.*}) are
 * read by the agent and ignored here.
 *
 * <ul>
 *   <li>{@code pool=PATH}: the pool; created when missing, recovered when present
 *   <li>{@code medium=auto|dax|file|shm|sim}: how stores become durable (default auto)
 *   <li>{@code chunk=SIZE}: bytes per heap space, for a new pool (default 64m)
 *   <li>{@code logSlots=N}, {@code logSlotBytes=SIZE}: undo-log blocks a new pool starts with,
 *       and their size (8, 1m); logs grow past them on any pool
 *   <li>{@code isolation.wait=MILLIS}: how long a failure-atomic section waits at its end for
 *       another thread's section it depends on before both commit as they stand (1000)
 *   <li>{@code roots=Old#f>New#g;Gone#h>-}: roots renamed or dropped since the pool was written
 *   <li>{@code sim.cutAt=N}, {@code sim.mode=drained|flushed|random:SEED}: power-cut tests
 * </ul>
 */
public record AgentOptions(
    Path pool,
    String medium,
    PersistentHeap.Options heap,
    RootNames roots,
    long simCutAt,
    String simMode) {

  public static AgentOptions parse(String args) {
    Map<String, String> kv = new LinkedHashMap<>();
    if (args != null && !args.isBlank()) {
      for (String part : args.split(",")) {
        int eq = part.indexOf('=');
        if (eq <= 0) {
          throw new IllegalArgumentException(
              "agent option '" + part + "' is not key=value: write e.g. pool=data.pool");
        }
        kv.put(part.substring(0, eq).trim(), part.substring(eq + 1).trim());
      }
    }
    PersistentHeap.Options d = PersistentHeap.Options.defaults();
    for (String k : kv.keySet()) {
      if (!k.startsWith("instrument.")
          && !java.util.Set.of("pool", "medium", "chunk", "logSlots", "logSlotBytes",
                  "isolation.wait", "roots", "sim.cutAt", "sim.mode")
              .contains(k)) {
        throw new IllegalArgumentException(
            "unknown agent option '" + k + "': known are pool, medium, chunk, logSlots,"
                + " logSlotBytes, isolation.wait, roots, sim.cutAt, sim.mode, instrument.*");
      }
    }
    return new AgentOptions(
        kv.containsKey("pool") ? Path.of(kv.get("pool")) : null,
        kv.getOrDefault("medium", "auto"),
        new PersistentHeap.Options(
            size(kv, "chunk", d.chunkBytes()),
            (int) size(kv, "logSlots", d.logSlots()),
            size(kv, "logSlotBytes", d.logSlotBytes()),
            size(kv, "isolation.wait", d.isolationWaitMillis())),
        RootNames.parse(kv.get("roots")),
        kv.containsKey("sim.cutAt") ? size(kv, "sim.cutAt", -1) : -1,
        kv.getOrDefault("sim.mode", "drained"));
  }

  /** A number with an optional k/m/g suffix (powers of 1024). */
  static long size(Map<String, String> kv, String key, long dflt) {
    String v = kv.get(key);
    if (v == null) return dflt;
    String s = v.toLowerCase();
    long mul = 1;
    if (s.endsWith("k")) mul = 1L << 10;
    else if (s.endsWith("m")) mul = 1L << 20;
    else if (s.endsWith("g")) mul = 1L << 30;
    if (mul != 1) s = s.substring(0, s.length() - 1);
    try {
      return Long.parseLong(s) * mul;
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("agent option " + key + "=" + v + " is not a size (e.g. 64m)");
    }
  }
}
