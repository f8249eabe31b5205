package kioku.stress;

import static org.openjdk.jcstress.annotations.Expect.ACCEPTABLE;
import static org.openjdk.jcstress.annotations.Expect.FORBIDDEN;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import org.openjdk.jcstress.annotations.Actor;
import org.openjdk.jcstress.annotations.Arbiter;
import org.openjdk.jcstress.annotations.Description;
import org.openjdk.jcstress.annotations.JCStressTest;
import org.openjdk.jcstress.annotations.Outcome;
import org.openjdk.jcstress.annotations.State;
import org.openjdk.jcstress.infra.results.L_Result;

/**
 * Two threads write the same persistent concurrent objects: the runtime locks each written
 * object, writes what the atomic operation will leave to its replica, then performs it; both
 * writers' operations must count, and every replica must equal its object afterwards.
 */
@JCStressTest
@Description("Two actors increment a persistent AtomicLong and LongAdder, add to an element of an"
    + " AtomicIntegerArray, race compareAndSet on an AtomicReference, put and merge into a"
    + " ConcurrentHashMap, offer to a ConcurrentLinkedQueue and add to a CopyOnWriteArrayList;"
    + " afterwards every value counts both actors and every replica equals its object.")
@Outcome(id = "OK [12]", expect = ACCEPTABLE, desc = "All counted, replicas agree; the digit says whose compareAndSet won.")
@Outcome(expect = FORBIDDEN, desc = "An operation was lost, or a replica differs from its object.")
@State
public class AtomicWritersTest {
  final Holder holder = Holder.persistent();
  final AtomicLong counter = new AtomicLong();
  final AtomicReference<Object> ref = new AtomicReference<>();
  final ConcurrentHashMap<Integer, Integer> map = new ConcurrentHashMap<>();
  final ConcurrentLinkedQueue<Integer> queue = new ConcurrentLinkedQueue<>();
  final CopyOnWriteArrayList<Integer> list = new CopyOnWriteArrayList<>();
  final AtomicIntegerArray ints = new AtomicIntegerArray(4);
  final LongAdder adder = new LongAdder();
  final Node one = new Node(1);
  final Node two = new Node(2);

  public AtomicWritersTest() {
    holder.left = new Object[] {counter, ref, map, queue, list, ints, adder}; // persistent first
  }

  @Actor
  public void first() {
    counter.incrementAndGet();
    ref.compareAndSet(null, one);
    map.put(1, 1);
    map.merge(0, 1, Integer::sum);
    queue.offer(1);
    list.add(1);
    ints.getAndAdd(2, 5);
    adder.increment();
    counter.addAndGet(10);
  }

  @Actor
  public void second() {
    counter.incrementAndGet();
    ref.compareAndSet(null, two);
    map.put(2, 2);
    map.merge(0, 1, Integer::sum);
    queue.offer(2);
    list.add(2);
    ints.getAndAdd(2, 7);
    adder.increment();
    counter.addAndGet(10);
  }

  @Arbiter
  public void check(L_Result r) {
    String c = Check.replicas(
        holder.named(new Check.Names()).add("counter", counter).add("ref", ref).add("map", map)
            .add("queue", queue).add("list", list).add("ints", ints).add("adder", adder)
            .add("one", one).add("two", two),
        holder);
    if (!Check.OK.equals(c)) {
      r.r1 = c;
    } else if (counter.get() != 22 || map.get(0) != 2 || map.size() != 3 || queue.size() != 2
        || list.size() != 2 || ints.get(2) != 12 || adder.sum() != 2) {
      r.r1 = "LOST counter=" + counter + " map=" + map + " queue=" + queue + " list=" + list
          + " ints=" + ints + " adder=" + adder;
    } else {
      r.r1 = "OK " + (ref.get() == one ? 1 : 2);
    }
    holder.release();
  }
}
