package kioku.persist.agent;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;
import kioku.persist.rt.FieldIds;

/**
 * The supported JDK classes as the agent rewrote them in an earlier JVM, so that start-up does
 * not run ASM over them again (most of the agent's start-up time). One file per agent jar, JDK
 * and exclusion list: the list of supported classes, the field numbers their rewritten code
 * uses (registered first, in the same order, so every number means the same field), and per
 * class the bytes the transformer returned. The key names the jar and the JDK's class archive
 * ({@code lib/modules}) by path, size and modification time, and the JVM by its version
 * strings: another build of either makes another key. Each class is matched by name only: the
 * bytes the JVM hands a retransformation are rebuilt from the loaded class and differ from run to
 * run (constant-pool order), though the class is the same. A class not in the file is rewritten
 * and gets its fields' old numbers or new ones, never another field's.
 *
 * <p>Nothing here uses MessageDigest, String.format or lambdas: at this point of start-up each
 * costs tens of milliseconds (provider set-up, method handles, interpreted hashing).
 *
 * <p>The file lives in a directory only its user may use (0700, its own, not a symbolic link),
 * is written 0600 through a temporary file and a rename, ends with a CRC-32 of the rest, and is
 * ignored (and rewritten) when that does not match, it does not parse, or it holds another key.
 * Saving a file deletes those of other keys not written for two weeks. Option
 * {@code instrument.cache=DIR}, or {@code off}; by default
 * {@code $XDG_CACHE_HOME/kioku-persist}, else {@code ~/.cache/kioku-persist}.
 */
final class TransformCache {
  private static final long MAGIC = 0x6b696f6b75746303L; // "kiokutc" 3

  /** Files of other keys older than this are deleted when a file is saved. */
  private static final int STALE_DAYS = 14;

  private final Path file;
  private final String key;
  /** From the file: class list, field ids, and the entries by internal name. */
  private List<String> classes;

  private List<FieldIds.FieldRef> fields = List.of();
  private final Map<String, byte[]> entries = new HashMap<>();
  /** This JVM's rewrites (made or found here), to save: internal name → output. */
  private final Map<String, byte[]> made = new LinkedHashMap<>();

  private int hits;
  private int misses;

  private TransformCache(Path file, String key) {
    this.file = file;
    this.key = key;
  }

  /**
   * The cache for this agent jar, JDK and list of excluded prefixes (which a rewrite may
   * consult), or null when off or unusable (said once).
   */
  static TransformCache open(String option, Path agentJar, List<String> excluded) {
    if ("off".equals(option)) return null;
    try {
      Path dir = option != null ? Path.of(option) : defaultDirectory();
      if (dir == null) return null;
      if (!privateDirectory(dir)) {
        Log.line("warning: not caching rewritten JDK classes in " + dir
            + ": it is a symbolic link, not a directory, or others may write it (want 0700);"
            + " give instrument.cache=DIR, or instrument.cache=off");
        return null;
      }
      String key = keyOf(agentJar) + "exclude=" + String.join(";", excluded) + "\n";
      Path file = dir.resolve("jdk-" + fileNameHash(key) + ".bin");
      TransformCache c = new TransformCache(file, key);
      c.load();
      return c;
    } catch (IOException | RuntimeException e) {
      Log.line("warning: not caching rewritten JDK classes (" + Log.reason(e)
          + "); give instrument.cache=DIR, or instrument.cache=off");
      return null;
    }
  }

  private static Path defaultDirectory() {
    String xdg = System.getenv("XDG_CACHE_HOME");
    if (xdg != null && !xdg.isBlank()) return Path.of(xdg, "kioku-persist");
    String home = System.getProperty("user.home");
    if (home == null || home.isBlank() || home.equals("?")) return null;
    return Path.of(home, ".cache", "kioku-persist");
  }

  /** Creates the directory 0700 if missing; true if it is a real directory only we can write. */
  private static boolean privateDirectory(Path dir) throws IOException {
    if (!Files.exists(dir, LinkOption.NOFOLLOW_LINKS)) {
      Files.createDirectories(dir.getParent());
      try {
        Files.createDirectory(dir, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
      } catch (java.nio.file.FileAlreadyExistsException e) {
        // made by another JVM meanwhile: check it below
      }
    }
    if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) return false;
    var perms = Files.getPosixFilePermissions(dir, LinkOption.NOFOLLOW_LINKS);
    String s = PosixFilePermissions.toString(perms);
    return s.substring(3).equals("------")
        && Files.getOwner(dir, LinkOption.NOFOLLOW_LINKS).getName().equals(System.getProperty("user.name"));
  }

  /**
   * The agent jar and the JDK, each by path, size and modification time (the JDK by its
   * {@code lib/modules}, which holds the classes rewritten), and the JVM's version strings.
   */
  private static String keyOf(Path agentJar) throws IOException {
    StringBuilder k = new StringBuilder();
    describe(k, agentJar.toAbsolutePath());
    describe(k, Path.of(System.getProperty("java.home"), "lib", "modules"));
    for (String p : new String[] {"java.runtime.version", "java.vm.version", "java.vm.name"}) {
      k.append(p).append('=').append(System.getProperty(p)).append('\n');
    }
    return k.toString();
  }

  private static void describe(StringBuilder k, Path p) throws IOException {
    java.nio.file.attribute.BasicFileAttributes a =
        Files.readAttributes(p, java.nio.file.attribute.BasicFileAttributes.class);
    k.append(p).append(' ').append(a.size()).append(' ')
        .append(a.lastModifiedTime().to(java.util.concurrent.TimeUnit.NANOSECONDS)).append('\n');
  }

  /** A file name for the key (a collision only makes two keys share a file, checked on load). */
  private static String fileNameHash(String key) {
    CRC32 crc = new CRC32();
    crc.update(key.getBytes(StandardCharsets.UTF_8));
    return Long.toHexString(crc.getValue() << 32 | (key.hashCode() & 0xffffffffL));
  }

  private void load() {
    if (!Files.isRegularFile(file, LinkOption.NOFOLLOW_LINKS)) return;
    try {
      byte[] all = Files.readAllBytes(file);
      if (all.length < 8) return;
      CRC32 crc = new CRC32();
      crc.update(all, 0, all.length - 8);
      if (java.nio.ByteBuffer.wrap(all, all.length - 8, 8).getLong() != crc.getValue()) return;
      DataInputStream in =
          new DataInputStream(new java.io.ByteArrayInputStream(all, 0, all.length - 8));
      if (in.readLong() != MAGIC || !in.readUTF().equals(key)) return;
      int n = in.readInt();
      List<String> cs = new ArrayList<>(n);
      for (int i = 0; i < n; i++) cs.add(in.readUTF());
      int f = in.readInt();
      List<FieldIds.FieldRef> fs = new ArrayList<>(f);
      for (int i = 0; i < f; i++) {
        fs.add(new FieldIds.FieldRef(in.readUTF(), in.readUTF(), in.readUTF(), in.readBoolean()));
      }
      int e = in.readInt();
      Map<String, byte[]> es = new HashMap<>();
      for (int i = 0; i < e; i++) {
        String name = in.readUTF();
        int len = in.readInt();
        byte[] out = in.readNBytes(len);
        if (out.length != len) throw new IOException("truncated");
        es.put(name, out);
      }
      if (in.available() != 0) throw new IOException("trailing bytes");
      classes = cs;
      fields = fs;
      entries.putAll(es);
    } catch (IOException | RuntimeException e) {
      classes = null; // unreadable: rewritten at the end of this start
      entries.clear();
      fields = List.of();
    }
  }

  /** The supported classes found last time (null: find them). */
  List<String> classes() {
    return classes;
  }

  /**
   * Registers the cached field numbers, before any class is rewritten; false (and the cache
   * is not used) if numbers were already given out differently.
   */
  boolean registerFields() {
    for (int i = 0; i < fields.size(); i++) {
      FieldIds.FieldRef r = fields.get(i);
      if (FieldIds.WRITTEN.register(r.owner(), r.name(), r.desc(), r.isVolatile()) != i + 1) {
        entries.clear();
        return false;
      }
    }
    return true;
  }

  /** The cached rewrite of the class, or null. */
  byte[] lookup(String internalName) {
    byte[] e = entries.get(internalName);
    if (e == null) return null;
    synchronized (made) {
      made.put(internalName, e);
      hits++;
    }
    return e;
  }

  /** Whether the cache holds the class's rewrite (counts nothing). */
  boolean peek(String internalName) {
    return entries.get(internalName) != null;
  }

  /** A class rewritten in this JVM. */
  void record(String internalName, byte[] output) {
    synchronized (made) {
      made.put(internalName, output);
      misses++;
    }
  }

  /** Writes the file if anything was rewritten this time (or the class list changed). */
  void saveIfChanged(List<String> classList) {
    synchronized (made) {
      if (misses == 0 && classList.equals(classes)) return;
      try {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        DataOutputStream out = new DataOutputStream(bytes);
        out.writeLong(MAGIC);
        out.writeUTF(key);
        out.writeInt(classList.size());
        for (String c : classList) out.writeUTF(c);
        int count = FieldIds.WRITTEN.count();
        out.writeInt(count);
        for (int id = 1; id <= count; id++) {
          FieldIds.FieldRef r = FieldIds.WRITTEN.get(id);
          out.writeUTF(r.owner());
          out.writeUTF(r.name());
          out.writeUTF(r.desc());
          out.writeBoolean(r.isVolatile());
        }
        out.writeInt(made.size());
        for (Map.Entry<String, byte[]> e : made.entrySet()) {
          out.writeUTF(e.getKey());
          out.writeInt(e.getValue().length);
          out.write(e.getValue());
        }
        out.flush();
        CRC32 crc = new CRC32();
        crc.update(bytes.toByteArray());
        out.writeLong(crc.getValue());
        out.flush();
        Path tmp = Files.createTempFile(file.getParent(), ".jdk-", ".tmp",
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        try {
          Files.write(tmp, bytes.toByteArray());
          Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } finally {
          Files.deleteIfExists(tmp);
        }
        pruneStale();
      } catch (IOException | RuntimeException e) {
        Log.line("warning: could not save the rewritten JDK classes to " + file + " (" + Log.reason(e) + ")");
      }
    }
  }

  /**
   * Deletes the files of other keys (other agent builds or JDKs) not written for
   * {@link #STALE_DAYS} days, so that rebuilding the agent does not fill the directory. A file
   * still in use is at worst written again at its next start.
   */
  private void pruneStale() {
    long cutoff = System.currentTimeMillis() - STALE_DAYS * 24L * 3600 * 1000;
    try (java.nio.file.DirectoryStream<Path> ds = Files.newDirectoryStream(file.getParent(), "jdk-*.bin")) {
      for (Path p : ds) {
        if (p.equals(file) || !Files.isRegularFile(p, LinkOption.NOFOLLOW_LINKS)) continue;
        if (Files.getLastModifiedTime(p, LinkOption.NOFOLLOW_LINKS).toMillis() < cutoff) {
          Files.deleteIfExists(p);
        }
      }
    } catch (IOException | RuntimeException e) {
      // Only housekeeping: the cache itself was saved.
    }
  }

  int hits() {
    synchronized (made) {
      return hits;
    }
  }
}
