package kioku.examples;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * java.util.concurrent in a persistent store, written by several threads without locks, run
 * under the agent and SIGKILLed (ConcurrentIT). Each thread, for each step: takes an id from
 * an AtomicLong, registers it in a ConcurrentHashMap (putIfAbsent: a reused id is reported),
 * counts its step in an AtomicLongArray, offers the id to a ConcurrentLinkedQueue, every 16th
 * step adds it to a CopyOnWriteArrayList, increments a LongAdder, sets an AtomicReference, and
 * every 8th step moves 1 between two entries of a ConcurrentHashMap of balances in an atomic
 * block; then prints "ack T STEP ID".
 *
 * <p>Every single operation is durable on return, so after a kill: every id registered was
 * issued (ids never go back, so none is issued twice, even across restarts); everything in
 * the queue and the list was registered; the per-thread counts are at least each thread's
 * last acknowledged step; and the balances still sum to their opening total. Modes: {@code
 * run THREADS} (checks first, then runs until killed), {@code check}. "INCONSISTENT ..." and
 * exit 3 on a violation.
 */
public class Concurrent {
  static final int THREADS_MAX = 8;
  static final int ACCOUNTS = 16;

  public static final class Store {
    final AtomicLong ids = new AtomicLong();
    final ConcurrentHashMap<Long, String> byId = new ConcurrentHashMap<>();
    final AtomicLongArray steps = new AtomicLongArray(THREADS_MAX);
    final ConcurrentLinkedQueue<Long> events = new ConcurrentLinkedQueue<>();
    final CopyOnWriteArrayList<Long> sampled = new CopyOnWriteArrayList<>();
    final LongAdder operations = new LongAdder();
    final AtomicReference<String> last = new AtomicReference<>("none");
    final AtomicBoolean started = new AtomicBoolean();
    final ConcurrentHashMap<Integer, Long> balances = new ConcurrentHashMap<>();
    final Set<Long> idsSeen = ConcurrentHashMap.newKeySet();
  }

  @DurableRoot static Store store;

  public static void main(String[] args) throws Exception {
    if (store == null) {
      Store s = new Store();
      for (int a = 0; a < ACCOUNTS; a++) s.balances.put(a, 100L);
      store = s;
    }
    String why = check(store);
    if (why != null) {
      System.out.println("INCONSISTENT " + why);
      System.out.flush();
      System.exit(3);
    }
    Store s = store;
    StringBuilder steps = new StringBuilder();
    for (int t = 0; t < THREADS_MAX; t++) steps.append(t == 0 ? "" : ",").append(s.steps.get(t));
    System.out.println("recovered ids=" + s.ids.get() + " entries=" + s.byId.size() + " steps=" + steps);
    System.out.flush();
    if (args[0].equals("check")) return;
    int threads = Integer.parseInt(args[1]);
    s.started.set(true);
    List<Thread> ts = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      int me = t;
      Thread th = new Thread(() -> work(s, me));
      th.start();
      ts.add(th);
    }
    for (Thread th : ts) th.join();
  }

  private static void work(Store s, int me) {
    java.util.SplittableRandom rnd = new java.util.SplittableRandom(me * 7919L + System.nanoTime());
    for (long step = s.steps.get(me) + 1; ; step++) {
      long id = s.ids.incrementAndGet();
      String was = s.byId.putIfAbsent(id, me + ":" + step);
      if (was != null) {
        System.out.println("INCONSISTENT id " + id + " issued twice: " + was + " and " + me + ":" + step);
        System.out.flush();
        Runtime.getRuntime().halt(3);
      }
      s.idsSeen.add(id);
      s.steps.set(me, step);
      s.events.offer(id);
      if (step % 16 == 0) s.sampled.add(id);
      s.operations.increment();
      s.last.set(me + ":" + id);
      if (step % 8 == 0) {
        int from = rnd.nextInt(ACCOUNTS);
        int to = rnd.nextInt(ACCOUNTS);
        KiokuPersist.atomic(() -> {
          s.balances.merge(from, -1L, Long::sum);
          s.balances.merge(to, 1L, Long::sum);
        });
      }
      // Drain the queue now and then so it does not grow without end.
      if (step % 64 == 0) {
        for (int k = 0; k < 32; k++) {
          Long e = s.events.peek();
          if (e == null || !s.byId.containsKey(e)) break;
          s.events.poll();
        }
      }
      System.out.println("ack " + me + " " + step + " " + id);
    }
  }

  /** Null if the store's invariants hold. */
  static String check(Store s) {
    long issued = s.ids.get();
    for (Map.Entry<Long, String> e : s.byId.entrySet()) {
      long id = e.getKey();
      if (id < 1 || id > issued) return "id " + id + " registered but only " + issued + " issued";
      String[] ts = e.getValue().split(":");
      int t = Integer.parseInt(ts[0]);
      if (Long.parseLong(ts[1]) > s.steps.get(t) + 1) return "id " + id + " of step " + e.getValue() + " past " + s.steps.get(t);
    }
    if (s.byId.size() > issued) return "entries " + s.byId.size() + " > issued " + issued;
    Set<Long> seen = new HashSet<>();
    for (Long e : s.events) {
      if (!s.byId.containsKey(e)) return "queued id " + e + " not registered";
      if (!seen.add(e)) return "id " + e + " queued twice";
    }
    for (Long e : s.sampled) if (!s.byId.containsKey(e)) return "sampled id " + e + " not registered";
    for (Long e : s.idsSeen) if (!s.byId.containsKey(e)) return "id set holds " + e + ", not registered";
    long total = 0;
    for (long b : s.balances.values()) total += b;
    if (total != ACCOUNTS * 100L) return "balances sum to " + total;
    if (s.balances.size() != ACCOUNTS) return "balances " + s.balances;
    long ops = s.operations.sum();
    if (ops > issued) return "operations " + ops + " > issued " + issued;
    if (!s.last.get().equals("none") && !s.byId.containsKey(Long.parseLong(s.last.get().split(":")[1]))) {
      return "last " + s.last.get() + " not registered";
    }
    // The map must work: a new key goes in and comes out.
    long probe = -1 - issued;
    if (s.byId.putIfAbsent(probe, "probe") != null || !"probe".equals(s.byId.remove(probe))) return "probe";
    return null;
  }
}
