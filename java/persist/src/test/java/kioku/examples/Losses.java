package kioku.examples;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * The losses of issue 13, each as a mode of one program run under the agent (LossesIT starts
 * it, kills it, starts it again and reads what it prints):
 *
 * <ul>
 *   <li>{@code isolation}: t1's atomic block writes the counter under a lock and stays open;
 *       t2's block increments the same counter and returns ("t2 returned count=N"), then the
 *       program waits to be killed. {@code check} prints "count=N list=[...]".
 *   <li>{@code bigmap N}: puts keys 0..N-1 into a persistent HashMap (past its undo-log size
 *       when the pool was made with a small one), printing "put i" as it goes, then "done".
 *       {@code checkmap} prints "map size=N ok" if the keys are exactly 0..N-1 with their values.
 *   <li>{@code exception}: an atomic block changes a list, a counter and a map, then throws;
 *       prints what the objects hold after the exception.
 *   <li>{@code enum}: the first run sets a field of an enum constant; later runs print it.
 *   <li>{@code identity}: the first run stores JDK shared instances; later runs print whether
 *       each came back as the same instance.
 * </ul>
 */
public class Losses {
  public static final class State {
    ArrayList<String> list = new ArrayList<>();
    int count;
    HashMap<Integer, String> map = new HashMap<>();
    Mode mode;
    List<Object> shared;
  }

  public enum Mode {
    ON,
    OFF;

    int uses;
  }

  @DurableRoot static State state;

  public static void main(String[] args) throws Exception {
    if (state == null) state = new State();
    State s = state;
    switch (args[0]) {
      case "isolation" -> isolation(s);
      case "check" -> System.out.println("count=" + s.count + " list=" + s.list);
      case "bigmap" -> bigmap(s, Integer.parseInt(args[1]));
      case "checkmap" -> checkmap(s);
      case "exception" -> exception(s);
      case "enum" -> {
        if (s.mode == null) {
          s.mode = Mode.ON;
          Mode.ON.uses = 5;
        }
        System.out.println("uses=" + Mode.ON.uses + " same=" + (s.mode == Mode.ON));
      }
      case "identity" -> identity(s);
      default -> throw new IllegalArgumentException(args[0]);
    }
    System.out.flush();
  }

  private static void isolation(State s) throws Exception {
    Object lock = new Object();
    java.util.concurrent.CountDownLatch wrote = new java.util.concurrent.CountDownLatch(1);
    Thread t1 = new Thread(() -> KiokuPersist.atomic(() -> {
      synchronized (lock) {
        s.list.add("t1");
        s.count++;
      }
      wrote.countDown();
      try {
        Thread.sleep(Long.MAX_VALUE); // never ends: killed
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }), "t1");
    t1.setDaemon(true);
    t1.start();
    wrote.await();
    int[] seen = new int[1];
    Thread t2 = new Thread(() -> KiokuPersist.atomic(() -> {
      synchronized (lock) {
        s.list.add("t2");
        s.count++;
        seen[0] = s.count;
      }
    }), "t2");
    t2.start();
    t2.join();
    System.out.println("t2 returned count=" + seen[0]);
    System.out.flush();
    Thread.sleep(Long.MAX_VALUE);
  }

  private static void bigmap(State s, int n) {
    for (int i = s.map.size(); i < n; i++) {
      s.map.put(i, "v" + i);
      if (i % 1000 == 0) {
        System.out.println("put " + i);
        System.out.flush();
      }
    }
    System.out.println("done " + s.map.size() + " blocks=" + KiokuPersist.stats().logBlocks());
  }

  private static void checkmap(State s) {
    int n = s.map.size();
    int seen = 0;
    for (Map.Entry<Integer, String> e : s.map.entrySet()) {
      int k = e.getKey();
      if (k < 0 || k >= n || !e.getValue().equals("v" + k)) {
        System.out.println("INCONSISTENT entry " + k + "=" + e.getValue() + " in a map of " + n);
        return;
      }
      seen++;
    }
    for (int i = 0; i < n; i++) {
      if (!("v" + i).equals(s.map.get(i))) {
        System.out.println("INCONSISTENT key " + i + " missing from a map of " + n);
        return;
      }
    }
    System.out.println(seen == n ? "map size=" + n + " ok" : "INCONSISTENT " + seen + " entries, size " + n);
  }

  private static void exception(State s) {
    String before = s.count + " " + s.list + " " + s.map;
    try {
      KiokuPersist.atomic(() -> {
        s.count += 10;
        s.list.add("lost");
        s.map.put(-1, "lost");
        throw new IllegalStateException("boom");
      });
    } catch (IllegalStateException e) {
      System.out.println("caught " + e.getMessage());
    }
    String after = s.count + " " + s.list + " " + s.map;
    System.out.println("before: " + before);
    System.out.println("after:  " + after);
  }

  private static void identity(State s) {
    List<Object> want = List.of(Boolean.TRUE, Boolean.FALSE, Integer.valueOf(5), Long.valueOf(-7),
        Short.valueOf((short) 100), Byte.valueOf((byte) 1), Character.valueOf('x'),
        Collections.emptyList(), Collections.emptyMap(), Collections.emptySet(),
        String.CASE_INSENSITIVE_ORDER, Collections.reverseOrder(), Comparator.naturalOrder());
    if (s.shared == null) {
      s.shared = new ArrayList<>(want);
      System.out.println("stored " + want.size());
      return;
    }
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < want.size(); i++) {
      b.append(s.shared.get(i) == want.get(i) ? "same" : "NEW " + want.get(i)).append(' ');
    }
    System.out.println(b.toString().strip());
  }
}
