package kioku.persist.heap;

import java.util.ArrayList;
import java.util.List;
import kioku.persist.pool.ScanReads;

/**
 * Marking of the replicas the roots (and the open undo logs) reach: for the GC, and at open,
 * where every replica it reaches is also checked against its check words ({@link
 * ReplicaCheck}) and one wrong word repaired, and replicas an undo just changed get their
 * checks recomputed. Every address, header and class id is checked on the way; anything that
 * does not fit is damage, reported before a single object is rebuilt.
 */
final class HeapMarking {
  private final PersistentHeap heap;
  private final HeapSpace space;
  private final ClassTable classes;
  private long repaired;

  /** At open: the allocator, rebuilt as replicas are marked (one pass instead of two). */
  private final Allocator rebuild;

  HeapMarking(PersistentHeap heap) {
    this(heap, null);
  }

  HeapMarking(PersistentHeap heap, Allocator rebuild) {
    this.heap = heap;
    this.space = heap.space();
    this.classes = heap.classes();
    this.rebuild = rebuild;
  }

  /**
   * Replicas of up to this many words are read whole into {@link #words} once (one bulk read
   * instead of a bounds-checked read per word, and once for the checks and the scan).
   */
  private static final int BUFFERED = 4096;

  /** Words read with the header at open (a small object's replica: 7 words for 4 fields). */
  private static final int HEAD = 8;

  /** The replica {@link #checkedSize} read, if {@link #loaded}. */
  private long[] words = new long[64];

  private boolean loaded;

  /** The class table by id, read once per marking (millions of lookups). */
  private ClassTable.Descriptor[] byId;

  private ClassTable.Descriptor descriptor(int cid) {
    return cid >= 1 && cid < byId.length ? byId[cid] : null;
  }

  /** Replicas this marking repaired. */
  long repaired() {
    return repaired;
  }

  /**
   * Marks from the roots and the open undo logs. With {@code touched} (at open) every replica
   * is checked too; those holding one of its addresses (sorted) get their checks recomputed.
   */
  Marks mark(long[] touched) throws HeapException {
    // At open nothing else reads or writes the heap: read it through a reader that does not
    // keep the pages mapped. The GC reads the medium, as the program may be storing.
    reads = touched != null ? space.medium.scanReads() : ScanReads.through(space.medium);
    try {
      return markFromRoots(touched);
    } finally {
      reads.close();
      reads = null;
    }
  }

  /** How {@link #mark} reads replicas. */
  private ScanReads reads;

  private Marks markFromRoots(long[] touched) throws HeapException {
    Marks live = new Marks(space);
    byId = new ClassTable.Descriptor[classes.size() + 1];
    for (int i = 1; i < byId.length; i++) byId[i] = classes.get(i);
    long[] stack = new long[1024];
    int sp = 0;
    List<Long> starts = new ArrayList<>(heap.roots().values());
    heap.sections().forEachLoggedReference(starts::add);
    for (long v : starts) {
      if (v == 0) continue;
      if (sp == stack.length) stack = java.util.Arrays.copyOf(stack, sp * 2);
      stack[sp++] = v;
    }
    boolean[][] refWords = new boolean[classes.size() + 1][];
    boolean[] used = new boolean[classes.size() + 1];
    while (sp > 0) {
      long addr = stack[--sp];
      if (!space.valid(addr, HeapFormat.HEADER)) throw PersistentHeap.damagedAt(addr, "points outside the heap");
      if (live.contains(addr)) continue;
      long size = checkedSize(addr, touched);
      boolean inWords = loaded;
      long[] w = words;
      long header = inWords ? w[0] : reads.getLong(space.off(addr));
      int cid = (int) header;
      long count = header >>> 32;
      ClassTable.Descriptor d = descriptor(cid);
      live.mark(addr);
      used[cid] = true; // d is not null: checkedSize refused the replica otherwise
      if (rebuild != null && !rebuild.markUsed(addr, size)) {
        throw PersistentHeap.damagedAt(addr, "overlaps another replica");
      }
      long body = addr + HeapFormat.HEADER;
      boolean scan = d.kind() == Layout.Kind.OBJECT || d.kind() == Layout.Kind.ENUM;
      if (scan) {
        boolean[] refs = refWords[cid];
        if (refs == null) refs = refWords[cid] = d.referenceWords();
        if (refs.length != count) throw PersistentHeap.damagedAt(addr, "has " + count + " words, its class " + refs.length);
        for (int i = 0; i < count; i++) {
          if (!refs[i]) continue;
          long v = inWords ? w[3 + i] : reads.getLong(space.off(body + 8L * i));
          if (v == 0) continue;
          if (sp == stack.length) stack = java.util.Arrays.copyOf(stack, sp * 2);
          stack[sp++] = v;
        }
      } else if (d.kind() == Layout.Kind.ARRAY && d.elementCode() == 'L') {
        for (long i = 0; i < count; i++) {
          long v = inWords ? w[3 + (int) i] : reads.getLong(space.off(body + 8L * i));
          if (v == 0) continue;
          if (sp == stack.length) stack = java.util.Arrays.copyOf(stack, sp * 2);
          stack[sp++] = v;
        }
      }
    }
    live.classes(used);
    live.rank();
    return live;
  }

  /**
   * The size of the replica at {@code addr} from its header, checked against the class table
   * and the heap space; at open ({@code touched} non-null) its check words are verified too,
   * and one wrong word (a store a crash tore, or a flipped bit) repaired.
   */
  private long checkedSize(long addr, long[] touched) throws HeapException {
    loaded = false;
    for (int attempt = 0; ; attempt++) {
      // At open, the first HEAD words in one read: the header and, for most small replicas,
      // everything the checks need (one window lookup and copy per replica instead of two).
      int ahead = attempt == 0 && touched != null && space.valid(addr, 8L * HEAD) ? HEAD : 0;
      long header;
      if (ahead > 0) {
        reads.getLongs(space.off(addr), words, 0, HEAD);
        header = words[0];
      } else {
        header = reads.getLong(space.off(addr));
      }
      int cid = (int) header;
      long count = header >>> 32;
      ClassTable.Descriptor d = descriptor(cid);
      long size = d == null ? -1 : d.replicaSize(count);
      boolean fits = d != null && space.valid(addr, size)
          && (d.bodyWords() < 0 || d.bodyWords() == count);
      if (touched == null) {
        if (d == null) throw PersistentHeap.damagedAt(addr, "names class " + cid + " which the class table lacks");
        if (!fits) throw PersistentHeap.damagedAt(addr, "runs past its heap space");
        return size; // the GC reads the medium word by word, as the program may be storing

      }
      if (!fits) {
        // The header itself may be the one wrong word: the checks over the smallest replica
        // cannot tell, so try what S1 says it was if that makes a valid header.
        if (attempt == 0 && repairHeader(addr)) continue;
        if (d == null) throw PersistentHeap.damagedAt(addr, "names class " + cid + " which the class table lacks");
        throw PersistentHeap.damagedAt(addr, "runs past its heap space");
      }
      if (touchedIn(touched, addr, size)) {
        ReplicaCheck.recompute(space, addr, size);
        space.flush(addr + ReplicaCheck.S1, 16);
        return size;
      }
      if (load(addr, size, ahead) ? words[0] == header && ReplicaCheck.holds(words, (int) (size / 8))
          : holdsLarge(addr, size, header)) {
        return size;
      }
      loaded = false; // a repair below may change words: the caller reads the medium
      switch (ReplicaCheck.verify(space, addr, size)) {
        case INTACT:
          return size;
        case REPAIRED:
          repaired++;
          if (space.getLong(addr) != header) {
            long again = space.getLong(addr);
            ClassTable.Descriptor d2 = classes.get((int) again);
            if (d2 == null || d2.replicaSize(again >>> 32) != size) {
              throw PersistentHeap.damagedAt(addr, "has a damaged header");
            }
          }
          space.drain();
          return size;
        default:
          throw PersistentHeap.damagedAt(addr, "(" + d.name() + ", " + size + " bytes) fails its check words"
              + " and no single wrong word explains it (two or more words differ, or its check S2)");
      }
    }
  }

  /**
   * Whether the check words of a replica too large for {@link #words} hold, read in runs of
   * {@link #BUFFERED} words through {@link #reads} (the fast path of {@link
   * ReplicaCheck#verify}, which a replica that fails it must still go through).
   */
  private boolean holdsLarge(long addr, long size, long header) {
    long off = space.off(addr);
    long n = size >>> 3;
    if (words.length < BUFFERED) words = new long[BUFFERED];
    long[] w = words;
    long s1 = 0;
    ReplicaCheck.Sum s2 = new ReplicaCheck.Sum();
    long checks1 = 0;
    long checks2 = 0;
    for (long from = 0; from < n; from += BUFFERED) {
      int len = (int) Math.min(BUFFERED, n - from);
      reads.getLongs(off + 8 * from, w, 0, len);
      for (int i = 0; i < len; i++) {
        long p = from + i;
        long x = w[i];
        if (p == 1) {
          checks1 = x;
        } else if (p == 2) {
          checks2 = x;
        } else {
          if (p == 0 && x != header) return false;
          s1 ^= x;
          s2.add(ReplicaCheck.weight(p), x);
        }
      }
    }
    return s1 == checks1 && s2.value() == checks2;
  }

  /**
   * Reads a replica that fits in {@link #words} (size checked against the space already);
   * its first {@code ahead} words are there already.
   */
  private boolean load(long addr, long size, int ahead) {
    if (size > 8L * BUFFERED) return loaded = false;
    int n = (int) (size >>> 3);
    if (n <= ahead) return loaded = true;
    if (words.length < n) words = new long[Math.max(n, 2 * words.length)];
    reads.getLongs(space.off(addr), words, 0, n);
    return loaded = true;
  }

  /**
   * A header that names no class or does not fit: if flipping it to what S1 implies (the XOR of
   * everything else) gives a header whose replica then checks whole, that was the wrong word.
   */
  private boolean repairHeader(long addr) {
    long header = space.getLong(addr);
    long s1 = space.getLong(addr + ReplicaCheck.S1);
    for (int cid = 1; cid <= classes.size(); cid++) {
      ClassTable.Descriptor d = classes.get(cid);
      long words = d.bodyWords();
      if (words < 0) continue; // arrays and strings: the count is unknown, do not guess
      long size = d.replicaSize(words);
      if (!space.valid(addr, size)) continue;
      long candidate = (words << 32) | cid;
      long x = 0;
      for (long p = 3; p < size / 8; p++) x ^= space.getLong(addr + 8 * p);
      if ((x ^ candidate) != s1) continue;
      space.putLong(addr, candidate);
      if (ReplicaCheck.verify(space, addr, size) == ReplicaCheck.Outcome.INTACT) {
        space.flush(addr, 8);
        space.drain();
        repaired++;
        return true;
      }
      space.putLong(addr, header);
    }
    return false;
  }

  private static boolean touchedIn(long[] touched, long addr, long size) {
    if (touched.length == 0) return false;
    int i = java.util.Arrays.binarySearch(touched, addr);
    if (i < 0) i = -i - 1;
    return i < touched.length && touched[i] < addr + size;
  }

}
