package kioku.persist.pool;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Ranges flushed since the last drain, rounded out to pages and coalesced, so that one drain
 * makes one msync per contiguous run however many small flushes covered it.
 */
final class FlushRanges {
  /** start → end, disjoint and non-adjacent. */
  private final TreeMap<Long, Long> ranges = new TreeMap<>();

  /** Records {@code [off, off+len)} rounded out to pages, clipped to {@code limit}. */
  synchronized void add(long off, long len, long limit) {
    if (len <= 0) {
      return;
    }
    long start = off / Format.PAGE_SIZE * Format.PAGE_SIZE;
    long end = Math.min(Format.roundUp(off + len, Format.PAGE_SIZE), limit);
    Map.Entry<Long, Long> before = ranges.floorEntry(start);
    if (before != null && before.getValue() >= start) {
      start = before.getKey();
      end = Math.max(end, before.getValue());
      ranges.remove(before.getKey());
    }
    for (Map.Entry<Long, Long> e = ranges.ceilingEntry(start);
        e != null && e.getKey() <= end;
        e = ranges.ceilingEntry(start)) {
      end = Math.max(end, e.getValue());
      ranges.remove(e.getKey());
    }
    ranges.put(start, end);
  }

  /** The recorded ranges as {start, end} pairs in offset order; clears them. */
  synchronized List<long[]> take() {
    List<long[]> out = new ArrayList<>(ranges.size());
    ranges.forEach((s, e) -> out.add(new long[] {s, e}));
    ranges.clear();
    return out;
  }

  synchronized int size() {
    return ranges.size();
  }
}
