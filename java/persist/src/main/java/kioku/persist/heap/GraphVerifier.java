package kioku.persist.heap;

import java.lang.invoke.VarHandle;
import java.lang.reflect.Array;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import kioku.persist.pool.Medium;

/**
 * Compares a persistent graph with its replicas (KiokuPersist.verify): each primitive field
 * and element equal, each reference pointing at the referent's replica, each replica's check
 * words matching its contents. For tests and diagnostics.
 */
final class GraphVerifier {
  private final PersistentHeap heap;
  private final HeapSpace space;
  private final ClassTable classes;
  private final Medium medium;

  GraphVerifier(PersistentHeap heap) {
    this.heap = heap;
    this.space = heap.space();
    this.classes = heap.classes();
    this.medium = heap.medium();
  }

  List<String> verify(Object root) {
    List<String> bad = new ArrayList<>();
    java.util.IdentityHashMap<Object, Boolean> seen = new java.util.IdentityHashMap<>();
    ArrayDeque<Object> work = new ArrayDeque<>();
    if (root != null) work.add(root);
    VarHandle.fullFence();
    while (!work.isEmpty() && bad.size() < 100) {
      Object o = work.pollFirst();
      if (seen.put(o, Boolean.TRUE) != null) continue;
      long w = heap.word(o);
      if (w == 0) {
        bad.add(describe(o) + " is reachable but has no replica");
        continue;
      }
      long addr = PersistentHeap.addressOf(w);
      long header = space.getLong(addr);
      ClassTable.Descriptor d = classes.get((int) header);
      if (d == null) {
        bad.add(describe(o) + ": replica names no class");
        continue;
      }
      long size = d.replicaSize(header >>> 32);
      long[] checks = ReplicaCheck.compute(space, addr, size);
      if (checks[0] != space.getLong(addr + ReplicaCheck.S1) || checks[1] != space.getLong(addr + ReplicaCheck.S2)) {
        bad.add(describe(o) + ": replica check words do not match its contents");
      }
      if (d.kind() == Layout.Kind.CANONICAL) continue;
      Layout layout = Layout.of(o);
      long body = addr + HeapFormat.HEADER;
      switch (layout.kind) {
        case OBJECT, ENUM -> {
          for (int i = 0; i < layout.slots.length; i++) {
            Layout.Slot sl = layout.slots[i];
            long got = space.getLong(body + 8L * layout.wordOfSlot(i));
            if (sl.code() == 'L') {
              Object v = Unsafes.U.getObject(o, sl.offset());
              long want = v == null ? 0 : PersistentHeap.addressOf(heap.word(v));
              if (got != want) bad.add(describe(o) + "." + sl.field().getName() + ": replica points elsewhere");
              if (v != null) work.addLast(v);
            } else if (got != Layout.readBits(o, sl)) {
              bad.add(describe(o) + "." + sl.field().getName() + ": replica " + got + ", object " + Layout.readBits(o, sl));
            }
          }
        }
        case ARRAY -> {
          int n = Array.getLength(o);
          if ((header >>> 32) != n) bad.add(describe(o) + ": replica length differs");
          if (layout.elementCode == 'L') {
            for (int i = 0; i < n; i++) {
              Object v = ((Object[]) o)[i];
              long want = v == null ? 0 : PersistentHeap.addressOf(heap.word(v));
              if (space.getLong(body + 8L * i) != want) bad.add(describe(o) + "[" + i + "]: replica points elsewhere");
              if (v != null) work.addLast(v);
            }
          } else {
            byte[] want = ArrayBytes.toBytes(o, layout.elementCode, 0, n);
            byte[] got = new byte[want.length];
            medium.get(space.off(body), got, 0, got.length);
            if (!java.util.Arrays.equals(want, got)) bad.add(describe(o) + ": replica elements differ");
          }
        }
        default -> {
          // strings do not change
        }
      }
    }
    return bad;
  }

  private static String describe(Object o) {
    return o.getClass().getName() + "@" + Integer.toHexString(System.identityHashCode(o));
  }

}
