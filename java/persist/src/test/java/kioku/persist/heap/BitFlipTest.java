package kioku.persist.heap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import kioku.persist.PersistenceException;
import kioku.persist.pool.CrashMode;
import kioku.persist.pool.Pool;
import kioku.persist.pool.PoolException;
import kioku.persist.pool.Section;
import kioku.persist.pool.SimMedium;
import org.junit.jupiter.api.Test;

/**
 * One flipped bit anywhere the heap keeps data — every live replica, the heap's header, the
 * roots, the class table, the undo logs' headers, the pool's own metadata — is either repaired
 * or refused at open, never used: every open that succeeds recovers exactly the graph that was
 * written. {@code -Dkioku.flips=all} flips every bit instead of one per byte (for make soak).
 */
class BitFlipTest {
  static Node graph() {
    Node a = new Node();
    Node b = new Node();
    a.value = -7;
    a.big = Long.MIN_VALUE + 3;
    a.ratio = Math.PI;
    a.flag = true;
    a.letter = 'é';
    a.name = "héllo, 世界";
    a.next = b;
    a.numbers = new int[] {1, -2, 3, Integer.MAX_VALUE, 5};
    a.things = new Object[] {"x", 42, 7000L, b, null, a, new long[] {9, 8}, new byte[] {1, 2, 3}};
    a.color = Node.Color.GREEN;
    b.value = 2;
    b.next = a;
    b.name = "shared";
    b.color = Node.Color.RED;
    return a;
  }

  /** The graph in words, identities as first-seen numbers. */
  static String describe(Object o) {
    StringBuilder sb = new StringBuilder();
    describe(o, sb, new IdentityHashMap<>());
    return sb.toString();
  }

  private static void describe(Object o, StringBuilder sb, Map<Object, Integer> seen) {
    if (o == null) {
      sb.append("null");
      return;
    }
    Integer id = seen.get(o);
    if (id != null) {
      sb.append('@').append(id);
      return;
    }
    seen.put(o, seen.size());
    if (o instanceof Node n) {
      sb.append("Node{").append(n.value).append(',').append(n.big).append(',').append(n.ratio)
          .append(',').append(n.flag).append(',').append((int) n.letter).append(',');
      describe(n.name, sb, seen);
      sb.append(',');
      describe(n.next, sb, seen);
      sb.append(',');
      describe(n.numbers, sb, seen);
      sb.append(',');
      describe(n.things, sb, seen);
      sb.append(',').append(n.color).append('}');
    } else if (o instanceof Object[] arr) {
      sb.append('[');
      for (Object e : arr) {
        describe(e, sb, seen);
        sb.append(';');
      }
      sb.append(']');
    } else if (o instanceof int[] x) {
      sb.append(java.util.Arrays.toString(x));
    } else if (o instanceof long[] x) {
      sb.append(java.util.Arrays.toString(x));
    } else if (o instanceof byte[] x) {
      sb.append(java.util.Arrays.toString(x));
    } else {
      sb.append(o.getClass().getSimpleName()).append(':').append(o);
    }
  }

  /**
   * Byte ranges [start, end, isReplica] of the pool file that hold something the heap reads.
   */
  private static List<long[]> usedRanges(SimMedium m) throws Exception {
    List<long[]> used = new ArrayList<>();
    PersistentHeap h = HeapHarness.open(SimMedium.fromImage(m.crash(CrashMode.DRAINED_ONLY)));
    Pool pool = h.pool();
    used.add(new long[] {0, 4096}); // the pool's header and commit slots
    Section meta = pool.section(HeapFormat.META).orElseThrow();
    used.add(new long[] {meta.offset(), meta.offset() + 64});
    int roots = h.roots().size();
    used.add(new long[] {meta.offset() + HeapFormat.ROOTS_OFF,
        meta.offset() + HeapFormat.ROOTS_OFF + (long) roots * HeapFormat.ROOT_ENTRY});
    Section cls = pool.section(HeapFormat.CLASSES).orElseThrow();
    used.add(new long[] {cls.offset(), cls.offset() + 256 * h.classes().size()}); // roughly the records
    Section log = pool.section(HeapFormat.LOG).orElseThrow();
    for (long b = log.offset(); b < log.offset() + log.length(); b += 64 << 10) used.add(new long[] {b, b + 64});
    HeapSpace space = h.space();
    Marks live = h.markLive();
    live.forEach((i, addr) -> {
      long header = space.getLong(addr);
      long size = h.classes().get((int) header).replicaSize(header >>> 32);
      used.add(new long[] {space.off(addr), space.off(addr) + size, 1});
    });
    return used;
  }

  @Test
  void aFlippedBitIsRepairedOrRefusedNeverUsed() throws Exception {
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    HeapHarness.setRoot(h, graph());
    byte[] image = m.crash(CrashMode.DRAINED_ONLY);
    String want = describe(HeapHarness.recoveredRoot(HeapHarness.open(SimMedium.fromImage(image))));
    assertEquals(describe(graph()), want);
    boolean all = "all".equals(System.getProperty("kioku.flips"));
    int refused = 0;
    int repaired = 0;
    int harmless = 0;
    long bytes = 0;
    for (long[] r : usedRanges(m)) {
      boolean replica = r.length > 2;
      // Every byte of every replica; a quarter of the metadata bytes (all with kioku.flips=all).
      int step = all || replica ? 1 : 4;
      for (long off = r[0]; off < r[1]; off += step) {
        bytes++;
        for (int bit = 0; bit < 8; bit++) {
          if (!all && bit != (int) (off % 8)) continue;
          byte[] flipped = image.clone();
          flipped[(int) off] ^= (byte) (1 << bit);
          String got;
          long fixed;
          try {
            PersistentHeap opened = HeapHarness.open(SimMedium.fromImage(flipped));
            got = describe(HeapHarness.recoveredRoot(opened));
            fixed = opened.stats().repairedAtOpen();
          } catch (HeapException | PersistenceException | PoolException e) {
            String msg = e.getMessage();
            if (!(msg.contains("damaged") || msg.contains("checksum") || msg.contains("does not check")
                || msg.contains("not a kioku pool") || msg.contains("restore") || msg.contains("version"))) {
              fail("byte " + off + " bit " + bit + ": refused without saying it is damaged: " + msg);
            }
            refused++;
            continue;
          }
          if (!got.equals(want)) fail("byte " + off + " bit " + bit + " was used:\n  got  " + got + "\n  want " + want);
          // A replica's every bit is under its check words: a flip there is never unnoticed.
          if (replica && fixed == 0) fail("byte " + off + " bit " + bit + " of a replica went unnoticed");
          if (fixed > 0) repaired++;
          else harmless++;
        }
      }
    }
    System.out.println("bit flips over " + bytes + " used bytes: " + refused + " refused, "
        + repaired + " repaired, " + harmless + " in metadata the heap did not need");
    assertTrue(refused > 0 && repaired > 0);
  }

  @Test
  void aTornStoreIsRepairedAtOpen() throws Exception {
    // A store outside a section whose word reached the medium but whose check words did not
    // (a crash before its drain) is one wrong word: repaired, either value kept.
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    Node a = graph();
    HeapHarness.setRoot(h, a);
    long w = h.word(a);
    long at = PersistentHeap.addressOf(w) + HeapFormat.HEADER; // slot 0: value
    byte[] image = m.crash(CrashMode.DRAINED_ONLY);
    SimMedium torn = SimMedium.fromImage(image);
    torn.putLong(h.space().off(at), 99); // the word, not its checks
    torn.persist(h.space().off(at), 8);
    PersistentHeap again = HeapHarness.open(SimMedium.fromImage(torn.crash(CrashMode.DRAINED_ONLY)));
    Node r = (Node) HeapHarness.recoveredRoot(again);
    assertTrue(r.value == -7 || r.value == 99, "value " + r.value);
    assertEquals(1, again.stats().repairedAtOpen());
  }

  @Test
  void aReplicaLargerThanOneReadIsCheckedWhole() throws Exception {
    // A long[5000] (40 KB) is checked at open in runs of words, not in one read: one flipped
    // bit anywhere in it but its check S2 is repaired; a flip in S2, or two wrong words, are
    // refused (S2 alone wrong is what two words changed in the same bits look like).
    SimMedium m = SimMedium.create(0);
    PersistentHeap h = HeapHarness.create(m);
    long[] big = new long[5000];
    for (int i = 0; i < big.length; i++) big[i] = i * 0x9E3779B97F4A7C15L;
    HeapHarness.setRoot(h, big);
    long at = h.space().off(PersistentHeap.addressOf(h.word(big)));
    byte[] image = m.crash(CrashMode.DRAINED_ONLY);
    for (long p : new long[] {1, 3, 4095, 4096, 4097, 5002}) { // S1, body across runs, last
      byte[] flipped = image.clone();
      flipped[(int) (at + 8 * p + 5)] ^= 0x10;
      PersistentHeap opened = HeapHarness.open(SimMedium.fromImage(flipped));
      long[] got = (long[]) HeapHarness.recoveredRoot(opened);
      assertTrue(java.util.Arrays.equals(big, got), "word " + p);
      assertEquals(1, opened.stats().repairedAtOpen(), "word " + p);
    }
    byte[] s2 = image.clone();
    s2[(int) (at + 8 * 2 + 5)] ^= 0x10;
    Exception refused = assertThrows(Exception.class, () -> HeapHarness.open(SimMedium.fromImage(s2)));
    assertTrue(refused.getMessage().contains("damaged"), refused.getMessage());
    byte[] twice = image.clone();
    twice[(int) (at + 8 * 3)] ^= 1;
    twice[(int) (at + 8 * 4500)] ^= 8; // another bit: the same bit in two words cancels in S1
    Exception e = assertThrows(Exception.class, () -> HeapHarness.open(SimMedium.fromImage(twice)));
    assertTrue(e.getMessage().contains("damaged"), e.getMessage());
  }
}
