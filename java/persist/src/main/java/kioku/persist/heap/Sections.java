package kioku.persist.heap;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongConsumer;
import kioku.persist.PersistenceException;
import kioku.persist.pool.Medium;

/**
 * Failure-atomic sections: a thread's stores to replicas between the outermost {@link #enter}
 * and its {@link #exit} survive a crash all or not at all, and sections of different threads
 * never undo each other's acknowledged stores.
 *
 * <p><b>Logging.</b> Before the first store to a replica word in a section, the word's old value
 * goes to the thread's undo log durably ({@link LogSpace}); at the end the stores are drained
 * and the log's seq moves on (the commit). The log grows by chaining blocks; if the pool cannot
 * give it more, the section is rolled back whole (pool and objects) and the store that needed
 * the space throws.
 *
 * <p><b>Isolation.</b> While any {@code KiokuPersist.atomic} block is open, every word a section
 * logs is owned by it until it commits. A store by another thread to an owned word (a section
 * that did not hold the lock protecting the data for its whole length, e.g. {@code atomic {
 * synchronized (s) {...} ... }}) makes the writer depend on the owner: their sections join one
 * group (durably: the writer's log is linked to the group's leader), the writer does not log
 * the word again (the owner's log has its value from before the group), and every member's
 * end waits until all have ended; then one 8-byte store (the leader's seq) commits them all.
 * A store outside any section to an owned word is a section of its own for this. Recovery rolls
 * back a group together, so a store that returned is never undone by another thread's
 * unfinished section. A group whose wait would deadlock (a member blocked on a lock a waiting
 * member holds) or lasts longer than the isolation limit commits as it stands, once: the
 * members still running go on with new sections, and a warning names the threads.
 *
 * <p><b>Exceptions.</b> An exception that leaves {@code atomic} rolls it back — the pool's words
 * and the objects' fields — unless another thread already joined its group (then its stores
 * are part of that thread's state and it commits with it).
 */
final class Sections {
  private static final System.Logger LOG = System.getLogger("kioku.persist");

  /** Restores an object's field or element (or a root) from a logged old value. */
  interface DramUndo {
    void restore(Object target, long replica, long at, long oldBits, Object oldRef);
  }

  /** One thread's section: open state, log chain, and what rolling it back in memory needs. */
  static final class Section {
    final Thread thread = Thread.currentThread();
    final long id;
    /** Held by the owner while it logs and writes one word; others take it to commit it early. */
    final ReentrantLock lock = new ReentrantLock();
    /** The thread's writer epoch, found here by stores that look this section up anyway. */
    WriterEpochs.State epoch;
    /** The thread's identity as a replica stripe's owner, found here by stores likewise. */
    ReplicaLocks.Owner stripes;
    int depth;
    boolean atomic;
    int head = -1;
    long seq;
    int tail;
    long tailUsed;
    int[] chain = new int[4];
    int chainLen;
    int entries;
    final LongSet logged = new LongSet();
    Object[] targets = new Object[16];
    Object[] oldRefs = new Object[16];
    long[] replicas = new long[16];
    long[] ats = new long[16];
    long[] olds = new long[16];
    boolean registered;
    Group group;
    boolean ended;
    boolean implicit;

    Section(long id) {
      this.id = id;
    }
  }

  /** Sections that commit together. */
  static final class Group {
    Section[] members = new Section[4];
    int count;
    int leader;
    long leaderSeq;
    boolean committed;
    boolean warned;

    void add(Section s) {
      if (count == members.length) members = Arrays.copyOf(members, count * 2);
      members[count++] = s;
    }

    boolean allEnded() {
      for (int i = 0; i < count; i++) if (!members[i].ended) return false;
      return true;
    }
  }

  private final LogSpace logs;
  private final Medium medium;
  private final HeapSpace space;
  private final DramUndo dram;
  private final long waitLimitNanos;
  private final AtomicLong ids = new AtomicLong();
  private final ThreadLocal<Section> current = ThreadLocal.withInitial(() -> new Section(ids.incrementAndGet()));
  private final Set<Section> withLogs = ConcurrentHashMap.newKeySet();
  private final ConcurrentHashMap<Long, Section> owners = new ConcurrentHashMap<>();
  private final AtomicInteger ownedWords = new AtomicInteger();
  private final AtomicInteger atomicOpen = new AtomicInteger();
  private final AtomicInteger rollbacks = new AtomicInteger();
  private final AtomicInteger earlyCommits = new AtomicInteger();
  /** Guards groups and ownership changes; the monitor waiting members wait on. */
  private final Object groupLock = new Object();
  private final ReplicaLocks replicaLocks;

  Sections(LogSpace logs, HeapSpace space, ReplicaLocks replicaLocks, DramUndo dram, long waitLimitMillis) {
    this.logs = logs;
    this.space = space;
    this.medium = space.medium;
    this.replicaLocks = replicaLocks;
    this.dram = dram;
    this.waitLimitNanos = waitLimitMillis * 1_000_000L;
  }

  // ---------------------------------------------------------------- entering and leaving

  /** Slots of {@link #recent}: threads whose ids agree in their low bits share one. */
  private static final int RECENT = 64;
  /** References per slot of {@link #recent}: 64 bytes, so that threads do not share a line. */
  private static final int RECENT_SPREAD = 16;

  /**
   * The section objects of recent storing threads, by thread id: {@link #mine} finds its own
   * with two loads and a compare instead of a {@code ThreadLocal} lookup (a store's dearest part
   * once its atomic was gone: WriteBench, docs/perf.md section 13). Written and read racily: a
   * thread uses an entry only if its final {@code thread} field is itself, and a thread's own
   * entry was written by itself.
   */
  private final Section[] recent = new Section[RECENT * RECENT_SPREAD];

  /** The thread's section object if {@link #recent} has it (no lookup), else null. */
  Section recent() {
    Thread t = Thread.currentThread();
    Section s = recent[((int) t.getId() & (RECENT - 1)) * RECENT_SPREAD];
    return s != null && s.thread == t ? s : null;
  }

  /** The thread's section object, open or not (one lookup for a store's several needs). */
  Section mine() {
    Thread t = Thread.currentThread();
    int i = ((int) t.getId() & (RECENT - 1)) * RECENT_SPREAD;
    Section s = recent[i];
    if (s != null && s.thread == t) return s;
    s = current.get();
    recent[i] = s;
    return s;
  }

  /** The thread's open section, or null outside one. */
  Section open() {
    Section s = current.get();
    return s.depth > 0 ? s : null;
  }

  /** Opens (or nests) a section; {@code atomicBlock} for KiokuPersist.atomic. */
  Section enter(boolean atomicBlock) {
    Section s = current.get();
    if (s.depth++ == 0) {
      s.atomic = atomicBlock;
      s.implicit = false;
      if (atomicBlock) atomicOpen.incrementAndGet();
    } else if (atomicBlock && !s.atomic) {
      s.atomic = true;
      atomicOpen.incrementAndGet();
    }
    return s;
  }

  /** A section around one store outside any section that found its word owned. */
  Section enterImplicit() {
    Section s = enter(false);
    s.implicit = true;
    return s;
  }

  /** Leaves a section; the outermost exit commits (waiting for its group, if any). */
  void exit() {
    Section s = current.get();
    if (s.depth == 0) return;
    if (--s.depth > 0) return;
    finish(s);
  }

  /**
   * Leaves an atomic block by an exception: the outermost rolls back unless another thread
   * depends on it. Returns true if it rolled back.
   */
  boolean exitByException() {
    Section s = current.get();
    if (s.depth == 0) return false;
    if (--s.depth > 0) return false;
    s.lock.lock();
    boolean undone;
    try {
      undone = rollback(s);
    } finally {
      s.lock.unlock();
    }
    if (!undone) finish(s);
    else closed(s);
    return undone;
  }

  private void closed(Section s) {
    if (s.atomic) atomicOpen.decrementAndGet();
    s.atomic = false;
    s.implicit = false;
  }

  private void finish(Section s) {
    if (s.group == null && !s.registered) {
      // Nobody can have joined: commit alone, without the group lock.
      s.lock.lock();
      try {
        commitAlone(s);
      } finally {
        s.lock.unlock();
      }
      closed(s);
      return;
    }
    Group early = null;
    synchronized (groupLock) {
      if (s.group == null) {
        commitAlone(s);
      } else {
        medium.drain(); // this member's stores, before it counts as ended
        s.ended = true;
        early = awaitGroup(s);
      }
    }
    if (early != null) commitEarly(early, s);
    closed(s);
  }

  /**
   * Drains and commits a section nobody joined; frees its log. Its words stop being owned only
   * once the commit is durable: a store by another thread before that would be undone with it.
   * The lock of s held, or (a section others could join) the group lock.
   */
  private void commitAlone(Section s) {
    if (s.entries > 0) {
      medium.drain();
      logs.advance(s.head);
    }
    unregister(s);
    reset(s);
    releaseBlocks(s);
  }

  // ---------------------------------------------------------------- logging

  /** True if some section owns words (a store must then check its word). */
  boolean mayBeOwned() {
    return ownedWords.get() != 0;
  }

  /** True if another thread's open section owns the word at {@code at}. */
  boolean ownedByOther(long at) {
    Section o = owners.get(at);
    return o != null && o.thread != Thread.currentThread();
  }

  /** How many rollbacks this heap has done (writers re-check memory once there were any). */
  boolean anyRollbacks() {
    return rollbacks.get() != 0;
  }

  /** Rollbacks so far (a rollback abandons the replicas its undone stores pointed to). */
  int rollbackCount() {
    return rollbacks.get();
  }

  /**
   * Called with {@code s.lock} held, before a store to the word at {@code at} (of the replica
   * at {@code replica}, or -1 for a word of persist.meta): logs its old value on the section's
   * first store to it, or joins the group of the section that owns it.
   *
   * @param target what {@link DramUndo} restores (the object, array or root field), or null
   * @param oldRef the reference the field held before the store (reference words)
   */
  void log(Section s, long at, boolean isRef, Object target, long replica, Object oldRef) {
    if (!s.logged.add(at)) return;
    if (ownedWords.get() != 0) {
      Section o = owners.get(at);
      if (o != null && o != s && join(s, o, at)) return;
    }
    long old = space.getLong(at);
    try {
      append(s, at | (isRef ? 1 : 0), old);
    } catch (HeapException e) {
      s.logged.remove(at);
      overflow(s, e, isRef, target, replica, at, old, oldRef);
      return;
    }
    remember(s, target, replica, at, old, oldRef);
    if (atomicOpen.get() > 0) register(s, at);
  }

  private void append(Section s, long key, long old) throws HeapException {
    if (s.head < 0) {
      s.head = logs.take();
      s.seq = logs.seqUnchecked(s.head);
      s.tail = s.head;
      s.tailUsed = 0;
      withLogs.add(s);
    }
    if (s.tailUsed == logs.entriesPerBlock()) {
      int next = logs.take();
      // The block may have been a head: move its own seq on so that no entry it holds from
      // that use can look current, then chain it.
      logs.advance(next);
      logs.linkNext(s.tail, s.seq, next);
      if (s.chainLen == s.chain.length) s.chain = Arrays.copyOf(s.chain, s.chainLen * 2);
      s.chain[s.chainLen++] = next;
      s.tail = next;
      s.tailUsed = 0;
    }
    logs.putEntry(s.tail, s.tailUsed, s.seq, s.head, key, old);
    s.tailUsed++;
    s.entries++;
  }

  private void remember(Section s, Object target, long replica, long at, long old, Object oldRef) {
    int i = s.entries - 1;
    if (i == s.targets.length) {
      int n = i * 2;
      s.targets = Arrays.copyOf(s.targets, n);
      s.oldRefs = Arrays.copyOf(s.oldRefs, n);
      s.replicas = Arrays.copyOf(s.replicas, n);
      s.ats = Arrays.copyOf(s.ats, n);
      s.olds = Arrays.copyOf(s.olds, n);
    }
    s.targets[i] = target;
    s.oldRefs[i] = oldRef;
    s.replicas[i] = replica;
    s.ats[i] = at;
    s.olds[i] = old;
  }

  private void register(Section s, long at) {
    Section prev = owners.putIfAbsent(at, s);
    if (prev == null) {
      ownedWords.incrementAndGet();
      s.registered = true;
    }
  }

  /**
   * Makes {@code s} depend on the section owning {@code at}; false if that one no longer owns
   * it (it committed or rolled back meanwhile: log the word as usual).
   */
  private boolean join(Section s, Section o, long at) {
    synchronized (groupLock) {
      if (owners.get(at) != o) return false;
      Group g = o.group;
      if (g == null) {
        g = new Group();
        g.add(o);
        g.leader = o.head;
        g.leaderSeq = o.seq;
        o.group = g;
      }
      Group h = s.group;
      if (h == g) return true;
      if (s.head < 0) {
        // The link needs a log of our own.
        try {
          s.head = logs.take();
        } catch (HeapException e) {
          throw new PersistenceException(e.getMessage(), e);
        }
        s.seq = logs.seqUnchecked(s.head);
        s.tail = s.head;
        s.tailUsed = 0;
        withLogs.add(s);
      }
      if (h == null) {
        logs.link(s.head, s.seq, g.leader, g.leaderSeq);
        g.add(s);
        s.group = g;
      } else {
        logs.link(h.leader, logs.seqUnchecked(h.leader), g.leader, g.leaderSeq);
        for (int i = 0; i < h.count; i++) {
          g.add(h.members[i]);
          h.members[i].group = g;
        }
        h.count = 0;
      }
      return true;
    }
  }

  // ---------------------------------------------------------------- groups

  /**
   * Waits (group lock held) until {@code s}'s group commits; commits it when the last member
   * ends. Returns the group to commit early if waiting would deadlock or takes too long.
   */
  private Group awaitGroup(Section s) {
    long start = System.nanoTime();
    long slice = 1;
    while (true) {
      Group g = s.group;
      if (g == null || g.committed) return null;
      if (g.allEnded()) {
        commitGroup(g);
        return null;
      }
      try {
        groupLock.wait(slice);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      slice = Math.min(slice * 2, 50);
      g = s.group;
      if (g == null || g.committed) return null;
      if (g.allEnded()) continue;
      if (System.nanoTime() - start > waitLimitNanos || deadlocked(g)) return g;
    }
  }

  /**
   * All members ended: commit them with the leader's seq, then move each member's own seq on
   * (which also voids its link: a link's check is tied to the seq it was written under). The
   * leader goes first; a member that moved on before it would be a member committed alone.
   * Group lock held.
   */
  private void commitGroup(Group g) {
    medium.drain();
    logs.advance(g.leader);
    for (int i = 0; i < g.count; i++) {
      Section m = g.members[i];
      if (m.head >= 0 && m.head != g.leader) logs.advance(m.head);
    }
    for (int i = 0; i < g.count; i++) {
      Section m = g.members[i];
      unregister(m);
      reset(m);
      releaseBlocks(m);
    }
    g.committed = true;
    groupLock.notifyAll();
  }

  /**
   * Commits a group whose members have not all ended: the ones still running go on with a
   * fresh section (their stores so far are durable, their block is no longer atomic as a
   * whole). Called without locks; {@code self} is the waiting caller.
   */
  private void commitEarly(Group g, Section self) {
    while (true) {
      Section[] members;
      synchronized (groupLock) {
        g = self.group;
        if (g == null || g.committed) return;
        members = Arrays.copyOf(g.members, g.count);
      }
      Arrays.sort(members, (a, b) -> Long.compare(a.id, b.id));
      for (Section m : members) m.lock.lock();
      try {
        synchronized (groupLock) {
          if (self.group != g || g.committed) continue;
          if (g.count != members.length) continue; // someone joined: lock them too
          String names = names(g);
          commitGroup(g);
          earlyCommits.incrementAndGet();
          LOG.log(
              System.Logger.Level.WARNING,
              "kioku-persist: atomic blocks of threads " + names + " wrote the same persistent"
                  + " data without holding its lock to their end, and waiting for all of them"
                  + " would deadlock or took too long: they were committed as they stood (the"
                  + " blocks still running go on as new sections). Hold the lock around"
                  + " KiokuPersist.atomic, not inside it.");
          return;
        }
      } finally {
        for (Section m : members) m.lock.unlock();
      }
    }
  }

  private static String names(Group g) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < g.count; i++) {
      if (i > 0) b.append(", ");
      b.append('"').append(g.members[i].thread.getName()).append('"');
    }
    return b.toString();
  }

  private ThreadMXBean threads;

  /**
   * Whether a member still running waits, through lock owners, for a member that waits for
   * the group: then nobody would ever finish.
   */
  private boolean deadlocked(Group g) {
    if (threads == null) threads = ManagementFactory.getThreadMXBean();
    long[] waiting = new long[g.count];
    int n = 0;
    for (int i = 0; i < g.count; i++) if (g.members[i].ended) waiting[n++] = g.members[i].thread.getId();
    for (int i = 0; i < g.count; i++) {
      Section m = g.members[i];
      if (m.ended) continue;
      if (!m.thread.isAlive()) return true;
      long t = m.thread.getId();
      int groupLockId = System.identityHashCode(groupLock);
      for (int hop = 0; hop < 32; hop++) {
        ThreadInfo info = threads.getThreadInfo(t);
        if (info == null) break;
        long owner = info.getLockOwnerId();
        if (owner < 0) break;
        // The group lock is held only for moments (by whoever checks, this thread included):
        // a thread waiting for it is not stuck behind a member.
        if (info.getLockInfo() != null && info.getLockInfo().getIdentityHashCode() == groupLockId) break;
        for (int k = 0; k < n; k++) if (waiting[k] == owner) return true;
        t = owner;
      }
    }
    return false;
  }

  // ---------------------------------------------------------------- rolling back

  /**
   * Undoes the section's stores in the pool and in the objects, newest first, then ends its
   * log. False (nothing done) if another thread's section joined it. Lock of s held.
   */
  private boolean rollback(Section s) {
    synchronized (groupLock) {
      if (s.group != null) return false;
      for (int i = s.entries - 1; i >= 0; i--) {
        long at = s.ats[i];
        long replica = s.replicas[i];
        long old = s.olds[i];
        if (replica >= 0) {
          int stripe = replicaLocks.lock(replica);
          try {
            long cur = space.getLong(at);
            space.putLong(at, old);
            long p = (at - replica) / 8;
            space.putLong(replica + ReplicaCheck.S1, space.getLong(replica + ReplicaCheck.S1) ^ ReplicaCheck.s1Delta(cur, old));
            space.putLong(replica + ReplicaCheck.S2,
                ReplicaCheck.s2Add(space.getLong(replica + ReplicaCheck.S2), ReplicaCheck.s2Delta(p, cur, old)));
            space.flush(at, 8);
            space.flush(replica + ReplicaCheck.S1, 16);
          } finally {
            replicaLocks.unlock(stripe);
          }
        } else {
          space.putLong(at, old);
          space.flush(at, 8);
        }
        dram.restore(s.targets[i], replica, at, old, s.oldRefs[i]);
      }
      if (s.entries > 0) {
        medium.drain();
        logs.advance(s.head);
      }
      unregister(s);
      reset(s);
      releaseBlocks(s);
      rollbacks.incrementAndGet();
      return true;
    }
  }

  /**
   * The log cannot grow: roll the section back whole (the store being made too) and throw; a
   * section others joined commits with them instead and goes on with a fresh log, once.
   */
  private void overflow(
      Section s, HeapException e, boolean isRef, Object target, long replica, long at, long old, Object oldRef) {
    if (s.group != null) {
      Group g;
      synchronized (groupLock) {
        g = s.group;
      }
      if (g != null) {
        s.lock.unlock(); // commitEarly takes every member's lock in order
        try {
          commitEarly(g, s);
        } finally {
          s.lock.lock();
        }
        log(s, at, isRef, target, replica, oldRef); // retry with a fresh log
        return;
      }
    }
    rollback(s);
    // The failing store itself: its object holds the new value, its replica word the old.
    dram.restore(target, replica, at, old, oldRef);
    throw new PersistenceException(
        "a failure-atomic section needs more undo log than the pool can give; it was rolled back"
            + " whole: " + e.getMessage(),
        e);
  }

  // ---------------------------------------------------------------- bookkeeping

  private void unregister(Section s) {
    if (!s.registered) return;
    for (int i = 0; i < s.entries; i++) {
      if (owners.remove(s.ats[i], s)) ownedWords.decrementAndGet();
    }
    s.registered = false;
  }

  /** Clears the section's open state (its log is committed or undone). */
  private void reset(Section s) {
    if (s.entries > 0 || s.logged.size() > 0) {
      Arrays.fill(s.targets, 0, Math.max(s.entries, 0), null);
      Arrays.fill(s.oldRefs, 0, Math.max(s.entries, 0), null);
    }
    s.entries = 0;
    s.logged.clear();
    s.group = null;
    s.ended = false;
    if (s.head >= 0) {
      s.seq = logs.seqUnchecked(s.head);
      s.tail = s.head;
      s.tailUsed = 0;
    }
  }

  /** Gives the section's blocks back (the section is over, or goes on with a fresh log). */
  private void releaseBlocks(Section s) {
    if (s.head < 0) return;
    for (int i = 0; i < s.chainLen; i++) logs.release(s.chain[i]);
    s.chainLen = 0;
    if (s.depth == 0) {
      logs.release(s.head);
      s.head = -1;
      withLogs.remove(s);
    } else {
      s.tail = s.head;
      s.tailUsed = 0;
    }
  }

  /** Old values of references in the logs of open sections (the GC keeps them alive). */
  void forEachLoggedReference(LongConsumer c) {
    for (Section s : withLogs) {
      int head = s.head;
      if (head < 0) continue;
      for (long[] e : logs.entries(head, logs.seqUnchecked(head))) {
        if ((e[0] & 1) != 0 && e[1] != 0) c.accept(e[1]);
      }
    }
  }

  int earlyCommits() {
    return earlyCommits.get();
  }

  // ---------------------------------------------------------------- recovery

  /** What {@link #rollBackAtOpen} undid: the logs (still to be ended) and the words restored. */
  record Undone(List<LogSpace.OpenLog> logs, long[] touched) {}

  /**
   * At open, before anything else reads the heap: undoes every uncommitted log, newest store
   * first, and drains. The logs stay valid until {@link #endAtOpen}, which the caller calls only
   * once the replicas holding the restored words have their check words recomputed durably: a
   * crash before that undoes them again (the same values), a crash after finds them ended.
   */
  static Undone rollBackAtOpen(LogSpace logs, HeapSpace space) throws HeapException {
    List<LogSpace.OpenLog> open = logs.uncommitted();
    LongSet touched = new LongSet();
    for (LogSpace.OpenLog log : open) {
      List<long[]> entries = log.entries();
      for (int i = entries.size() - 1; i >= 0; i--) {
        long addr = entries.get(i)[0] & ~7L;
        int sp = HeapFormat.space(addr);
        if (sp >= space.spaces() || HeapFormat.offset(addr) + 8 > space.spaceLength(sp)) {
          throw new HeapException(
              HeapException.Reason.DAMAGED,
              "persistent heap damaged: an undo log names address 0x" + Long.toHexString(addr)
                  + " outside the heap; restore the pool from a backup");
        }
        space.putLong(addr, entries.get(i)[1]);
        space.flush(addr, 8);
        touched.add(addr);
      }
    }
    space.drain();
    long[] out = touched.toArray();
    Arrays.sort(out);
    return new Undone(open, out);
  }

  /**
   * Ends the logs undone at open (links first, so that a crash in the middle leaves each one
   * to be undone again on its own), after a drain of everything before.
   */
  static void endAtOpen(LogSpace logs, HeapSpace space, Undone undone) {
    if (undone.logs().isEmpty()) return;
    space.drain();
    for (LogSpace.OpenLog log : undone.logs()) logs.unlink(log.head());
    for (LogSpace.OpenLog log : undone.logs()) logs.advance(log.head());
  }
}
