package kioku.persist.pool;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.EnumSet;
import java.util.List;
import java.util.Optional;
import java.util.UUID;

/**
 * An open pool (docs/pool.md, byte layout in docs/pool-format.md): named page-aligned sections
 * and a crash-atomic commit of the section table and up to 16 roots. Byte-compatible with the
 * Rust {@code kioku_pool::Pool}, with the same checks in the same order and the same errors.
 *
 * <p>Section contents are the owner's: write them through {@link #medium()} and make them
 * durable ({@code medium().flush}, or {@code persist}) before the {@link #commit} that must
 * include them. Space the live commit names is never handed out again before a commit drops
 * it, so a crash always finds the live commit's sections intact.
 *
 * <p>A pool opened from a path holds it exclusively until {@link #close}: a POSIX lock (other
 * Java processes), a check for a Rust owner's flock in /proc/locks, and a JVM-wide claim. Do not
 * open and close the pool file by other means in the same JVM while it is open: closing any
 * descriptor of a file drops the process's POSIX locks on it. Not thread-safe: one owner
 * changes the table and commits.
 */
public final class Pool implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger("kioku.persist.pool");
  private static final String IN_MEMORY = "(in memory)";

  private final Path path;
  private final String shown;
  private final Medium medium;
  /** Null for a medium given by the caller (then the caller also owns the medium). */
  private final PoolLock lock;
  private final Header header;
  private int live;
  private Slot committed;
  private List<Section> committedSections;
  /** The working table: what the next commit will hold. */
  private final List<Section> sections;
  private boolean closed;

  private Pool(Path path, String shown, Medium medium, PoolLock lock, Header header, int live,
      Slot committed, List<Section> sections) {
    this.path = path;
    this.shown = shown;
    this.medium = medium;
    this.lock = lock;
    this.header = header;
    this.live = live;
    this.committed = committed;
    this.committedSections = List.copyOf(sections);
    this.sections = new ArrayList<>(sections);
  }

  // ---- creating -----------------------------------------------------------------------------

  /**
   * Creates a pool file at {@code path}; refuses an existing path. The file is written under a
   * temporary name in the same directory and then linked into place without replacing
   * anything, so a pool appears under its name only complete.
   *
   * @param kind what the pool holds (1 to 32 bytes of UTF-8), e.g. "kioku.heap"
   */
  public static Pool create(Path path, String kind, MediumChoice choice) throws PoolException {
    checkKind(kind);
    String shown = path.toString();
    Media.refusePlantedLink(path);
    if (Files.exists(path, LinkOption.NOFOLLOW_LINKS)) {
      throw PoolException.exists(shown);
    }
    Path tmp = path.resolveSibling(
        "." + path.getFileName() + ".creating-" + ProcessHandle.current().pid());
    FileChannel ch;
    try {
      ch = FileChannel.open(tmp, EnumSet.of(StandardOpenOption.CREATE_NEW,
              StandardOpenOption.READ, StandardOpenOption.WRITE),
          PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
    } catch (IOException e) {
      throw PoolException.io("create", tmp.toString(), e);
    }
    PoolLock lock = null;
    Medium medium = null;
    boolean linked = false;
    try {
      lock = PoolLock.claim(tmp, tmp.toString());
      lock.lock(ch);
      try {
        MappedMedium.extendWithZeros(ch, 0, Format.dataOff(Format.PAGE_SIZE));
      } catch (IOException e) {
        throw PoolException.io("extend", tmp.toString(), e);
      }
      medium = Media.open(ch, tmp, shown, choice);
      Pool pool = format(medium, path, shown, lock, kind);
      try {
        Files.createLink(path, tmp);
      } catch (FileAlreadyExistsException e) {
        throw PoolException.exists(shown);
      } catch (IOException | UnsupportedOperationException e) {
        throw PoolException.io("link", shown, e);
      }
      linked = true;
      if (medium instanceof MappedMedium m) {
        m.movedTo(path);
      }
      try {
        Files.delete(tmp);
      } catch (IOException e) {
        throw PoolException.io("remove temporary name", tmp.toString(), e);
      }
      MappedMedium.syncDirectory(path, shown);
      return pool;
    } catch (PoolException | RuntimeException e) {
      if (medium != null) {
        medium.close();
      } else {
        Media.closeQuietly(ch);
      }
      if (lock != null) {
        lock.release();
      }
      if (!linked) {
        try {
          Files.deleteIfExists(tmp);
        } catch (IOException ignored) {
          // Best effort: a leftover temporary name is harmless and says what it was.
        }
      }
      throw e;
    }
  }

  /**
   * Formats a medium given by the caller (the simulator, in tests) as a new pool, growing it
   * to the metadata size if it is shorter. The caller keeps owning the medium.
   */
  public static Pool create(Medium medium, String kind) throws PoolException {
    checkKind(kind);
    long dataOff = Format.dataOff(Format.PAGE_SIZE);
    if (medium.length() < dataOff) {
      medium.grow(dataOff);
    }
    return format(medium, null, IN_MEMORY, null, kind);
  }

  private static void checkKind(String kind) {
    if (!Format.validName(kind, Format.MAX_KIND_LEN)) {
      throw new IllegalArgumentException(
          "pool kind '" + kind + "' is invalid (1 to 32 bytes of UTF-8, no NUL)");
    }
  }

  /** Writes the header, slot 0 (epoch 0, empty table) and live index 0, all persisted. */
  private static Pool format(Medium medium, Path path, String shown, PoolLock lock, String kind)
      throws PoolException {
    int page = Format.PAGE_SIZE;
    long now = nowNs();
    Header header = new Header(UUID.randomUUID(), page, medium.kind().code(), now, kind,
        Format.dataOff(page));
    Slot slot = new Slot(0, now, medium.length(), 0, Format.crc(new byte[0], 0, 0), new long[0]);
    byte[] h = header.encode();
    byte[] s = slot.encode();
    medium.put(0, h, 0, h.length);
    medium.put(Format.slotOff(0), s, 0, s.length);
    medium.putLong(Format.INDEX_OFF, 0);
    medium.persist(0, Format.METADATA_END);
    return new Pool(path, shown, medium, lock, header, 0, slot, List.of());
  }

  // ---- opening ------------------------------------------------------------------------------

  /** Opens a pool file for exclusive read-write use. */
  public static Pool open(Path path, MediumChoice choice) throws PoolException {
    return open(path, choice, null, false);
  }

  /**
   * Opens a pool file; with {@code allowRollback}, a damaged live slot whose predecessor is
   * intact opens the previous commit instead of failing with LIVE_SLOT_DAMAGED.
   */
  public static Pool open(Path path, MediumChoice choice, boolean allowRollback)
      throws PoolException {
    return open(path, choice, null, allowRollback);
  }

  /**
   * Opens a pool file, following "Opening" in pool-format.md: lock, header, live index, live
   * slot. Nothing is written before a commit is chosen, and nothing is ever repaired.
   *
   * @param kind the kind tag the pool must have (WRONG_KIND otherwise), or null for any
   */
  public static Pool open(Path path, MediumChoice choice, String kind, boolean allowRollback)
      throws PoolException {
    String shown = path.toString();
    Media.refusePlantedLink(path);
    PoolLock lock = PoolLock.claim(path, shown);
    FileChannel ch = null;
    try {
      ch = Media.openChannel(path);
      lock.lock(ch);
      long fileLen;
      try {
        fileLen = ch.size();
      } catch (IOException e) {
        throw PoolException.io("fstat", shown, e);
      }
      // Read with plain reads before mapping: a damaged or truncated file is diagnosed without
      // touching a mapping (no fault past the end of the file).
      FileChannel reader = ch;
      Examination ex = Examination.examine(fileLen, (off, len) -> readAt(reader, off, len, shown),
          shown);
      Chosen c = choose(ex, shown, kind, allowRollback);
      Medium medium = Media.open(ch, path, shown, choice);
      return assemble(path, shown, medium, lock, c);
    } catch (PoolException | RuntimeException e) {
      if (ch != null) {
        Media.closeQuietly(ch);
      }
      lock.release();
      throw e;
    }
  }

  /** Opens the pool on a medium given by the caller (a crash image on the simulator). */
  public static Pool open(Medium medium) throws PoolException {
    return open(medium, false);
  }

  /** As {@link #open(Medium)}, optionally rolling back past a damaged live slot. */
  public static Pool open(Medium medium, boolean allowRollback) throws PoolException {
    long len = medium.length();
    Examination ex = Examination.examine(len, (off, want) -> {
      int n = (int) Math.max(0, Math.min(want, len - off));
      byte[] b = new byte[n];
      medium.get(off, b, 0, n);
      return b;
    }, IN_MEMORY);
    return assemble(null, IN_MEMORY, medium, null, choose(ex, IN_MEMORY, null, allowRollback));
  }

  /** The commit an open will use. */
  private record Chosen(Header header, int live, Slot slot, List<Section> sections) {}

  /** Turns an examination into the commit to use or the error to report, in Rust's order. */
  private static Chosen choose(Examination ex, String shown, String kind, boolean allowRollback)
      throws PoolException {
    Header h = ex.header();
    if (h.pageSize() != Format.PAGE_SIZE) {
      throw PoolException.pageSizeMismatch(shown, h.pageSize(), Format.PAGE_SIZE);
    }
    if (kind != null && !h.kind().equals(kind)) {
      throw PoolException.wrongKind(shown, kind, h.kind());
    }
    int live;
    Examination.Verdict v = ex.verdict();
    if (v instanceof Examination.Verdict.Healthy healthy) {
      live = healthy.live();
    } else if (v instanceof Examination.Verdict.RollbackAvailable r) {
      if (!allowRollback) {
        throw PoolException.liveSlotDamaged(shown, r.damaged(), r.detail(), r.previousEpoch());
      }
      LOG.log(System.Logger.Level.WARNING, "{0}: rolling back to the previous commit (epoch {1})"
          + " because {2}", shown, Long.toUnsignedString(r.previousEpoch()), r.detail());
      live = r.previous();
    } else if (v instanceof Examination.Verdict.Truncated t) {
      throw PoolException.truncated(shown, "the live commit", t.needed(), t.found());
    } else if (v instanceof Examination.Verdict.CommitDamaged d) {
      throw PoolException.commitDamaged(shown, d.detail());
    } else {
      throw new AssertionError(v);
    }
    Examination.SlotState.Intact st = (Examination.SlotState.Intact) ex.slots().get(live);
    return new Chosen(h, live, st.slot(), st.sections());
  }

  private static Pool assemble(Path path, String shown, Medium medium, PoolLock lock, Chosen c) {
    MediumKind created = MediumKind.fromCode(c.header().createdMedium());
    if (created != medium.kind()) {
      LOG.log(System.Logger.Level.INFO, "{0}: pool created on {1} opened on {2}", shown,
          created == null ? "unknown medium " + c.header().createdMedium() : created,
          medium.kind());
    }
    return new Pool(path, shown, medium, lock, c.header(), c.live(), c.slot(), c.sections());
  }

  /** Up to {@code len} bytes at {@code off} (fewer at the end of the file). */
  private static byte[] readAt(FileChannel ch, long off, int len, String shown)
      throws PoolException {
    ByteBuffer b = ByteBuffer.allocate(len);
    try {
      while (b.hasRemaining()) {
        if (ch.read(b, off + b.position()) < 0) {
          break;
        }
      }
    } catch (IOException e) {
      throw PoolException.io("read", shown, e);
    }
    return Arrays.copyOf(b.array(), b.position());
  }

  // ---- what the pool holds ------------------------------------------------------------------

  /** What the pool holds, as tagged at creation. */
  public String kind() {
    return header.kind();
  }

  public UUID uuid() {
    return header.uuid();
  }

  /** Epoch of the last commit (0 for a new pool). */
  public long epoch() {
    return committed.epoch();
  }

  /** Roots of the last commit. */
  public long[] roots() {
    return committed.roots();
  }

  public int pageSize() {
    return header.pageSize();
  }

  /** Which slot (0 or 1) holds the last commit. */
  public int liveSlot() {
    return live;
  }

  /** Where the data area starts; sections lie at or after it. */
  public long dataOffset() {
    return header.dataOff();
  }

  /** Sections as the next commit will hold them (after open or commit: the committed ones). */
  public List<Section> sections() {
    return List.copyOf(sections);
  }

  /** Sections of the last commit. */
  public List<Section> committedSections() {
    return committedSections;
  }

  /** The section of that name in the working table. */
  public Optional<Section> section(String name) {
    return sections.stream().filter(s -> s.name().equals(name)).findFirst();
  }

  public Medium medium() {
    return medium;
  }

  /** The pool file, or null for a medium given by the caller. */
  public Path path() {
    return path;
  }

  // ---- changing it --------------------------------------------------------------------------

  /**
   * Reserves a page-aligned extent for a new section in the working (next) table; the file
   * grows (durably) if needed; the space is zero. Visible to readers after {@link #commit}.
   *
   * @param length bytes, rounded up to whole pages (at least one)
   * @param flags owner-defined bits
   * @throws IllegalArgumentException for a bad name (1 to 32 bytes of UTF-8, no NUL) or one
   *     already in the working table
   * @throws PoolException TABLE_FULL with 512 sections, or when the medium cannot grow
   */
  public Section addSection(String name, long length, int flags) throws PoolException {
    checkOpen();
    if (!Format.validName(name, Format.MAX_NAME_LEN)) {
      throw new IllegalArgumentException(
          "section name '" + name + "' is invalid (1 to 32 bytes of UTF-8, no NUL)");
    }
    if (section(name).isPresent()) {
      throw new IllegalArgumentException("section '" + name + "' already exists");
    }
    if (length < 0) {
      throw new IllegalArgumentException("section length " + length + " is negative");
    }
    if (sections.size() >= Format.MAX_SECTIONS) {
      throw PoolException.tableFull(shown);
    }
    long len = Format.roundUp(Math.max(length, 1), header.pageSize());
    Section s = new Section(name, allocate(len), len, flags);
    sections.add(s);
    return s;
  }

  /**
   * Removes a section from the working table; its space is reusable only after a commit that no
   * longer names it.
   *
   * @throws IllegalArgumentException when no section has that name
   */
  public void removeSection(String name) {
    checkOpen();
    if (!sections.removeIf(s -> s.name().equals(name))) {
      throw new IllegalArgumentException("no section named '" + name + "'");
    }
  }

  /**
   * First free extent of {@code len} bytes after the data offset, avoiding every extent named
   * by the working or the live table; the file grows when no gap fits.
   */
  private long allocate(long len) throws PoolException {
    List<Section> busy = new ArrayList<>(sections);
    busy.addAll(committedSections);
    busy.sort(Comparator.comparingLong(Section::offset).thenComparingLong(Section::end));
    long at = header.dataOff();
    for (Section s : busy) {
      if (s.offset() >= at + len) {
        break;
      }
      at = Math.max(at, s.end());
    }
    growZeroed(at, len);
    return at;
  }

  /**
   * Makes {@code [off, off+len)} exist and read as zeros, durably. Bytes past the current end
   * are zero once the medium grows; only space below it (freed earlier, or written before a
   * crash) may need clearing.
   */
  private void growZeroed(long off, long len) throws PoolException {
    long oldLen = medium.length();
    long want = Format.roundUp(off + len, header.pageSize());
    if (want > oldLen) {
      medium.grow(want);
    }
    long end = Math.min(off + len, oldLen);
    if (end > off && !isZero(off, end - off)) {
      byte[] zeros = new byte[(int) Math.min(end - off, 1 << 16)];
      for (long p = off; p < end; p += zeros.length) {
        medium.put(p, zeros, 0, (int) Math.min(zeros.length, end - p));
      }
      medium.persist(off, end - off);
    }
  }

  private boolean isZero(long off, long len) {
    byte[] buf = new byte[(int) Math.min(len, 1 << 16)];
    for (long p = off; p < off + len; p += buf.length) {
      int n = (int) Math.min(buf.length, off + len - p);
      medium.get(p, buf, 0, n);
      if (!Format.allZero(buf, 0, n)) {
        return false;
      }
    }
    return true;
  }

  /**
   * Commits the working section table and {@code roots} atomically (the protocol of
   * pool-format.md): write table N and flush it; write slot N (epoch + 1) and flush it; drain;
   * store N into the live index with one aligned 8-byte store, flush, drain. A crash before
   * the index store reaches media leaves the previous commit live; after it, this one.
   *
   * <p>Section data the commit must include has to be flushed before the call: the commit's
   * first drain orders it together with the commit record.
   *
   * @throws IllegalArgumentException for more than 16 roots
   */
  public void commit(long[] roots) throws PoolException {
    checkOpen();
    if (roots.length > Format.MAX_ROOTS) {
      throw new IllegalArgumentException("a commit carries at most " + Format.MAX_ROOTS
          + " roots, " + roots.length + " given");
    }
    int next = 1 - live;
    byte[] table = SectionTable.encode(sections);
    Slot slot = new Slot(committed.epoch() + 1, nowNs(), medium.length(), sections.size(),
        Format.crc(table, 0, table.length), roots);
    if (table.length > 0) {
      medium.put(Format.TABLE_OFF[next], table, 0, table.length);
      medium.flush(Format.TABLE_OFF[next], table.length);
    }
    byte[] s = slot.encode();
    medium.put(Format.slotOff(next), s, 0, s.length);
    medium.flush(Format.slotOff(next), Format.SLOT_LEN);
    medium.drain();
    medium.putLong(Format.INDEX_OFF, next); // aligned: one failure-atomic store
    medium.flush(Format.INDEX_OFF, 8);
    medium.drain();
    live = next;
    committed = slot;
    committedSections = List.copyOf(sections);
  }

  private void checkOpen() {
    if (closed) {
      throw new IllegalStateException(shown + ": the pool is closed");
    }
  }

  /**
   * Releases the pool: for a pool opened from a path, its mapping and lock (uncommitted changes
   * to the table are dropped; the last commit is durable). A medium given by the caller stays
   * open.
   */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    if (lock != null) {
      medium.close();
      lock.release();
    }
  }

  private static long nowNs() {
    Instant t = Instant.now();
    return t.getEpochSecond() * 1_000_000_000L + t.getNano();
  }

  @Override
  public String toString() {
    return "pool " + shown + " (" + kind() + ", epoch " + Long.toUnsignedString(epoch()) + ", "
        + sections.size() + " sections, on " + medium.kind() + ")";
  }
}
