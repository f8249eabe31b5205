package kioku.stress;

import static org.openjdk.jcstress.annotations.Expect.ACCEPTABLE;
import static org.openjdk.jcstress.annotations.Expect.FORBIDDEN;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.openjdk.jcstress.annotations.Actor;
import org.openjdk.jcstress.annotations.Arbiter;
import org.openjdk.jcstress.annotations.Description;
import org.openjdk.jcstress.annotations.JCStressTest;
import org.openjdk.jcstress.annotations.Outcome;
import org.openjdk.jcstress.annotations.State;
import org.openjdk.jcstress.infra.results.L_Result;

/**
 * Atomic writes racing make_persistent: an atomic operation that found its object white runs
 * at once and then checks the object again (it may have turned persistent, and its copier read
 * the old value); the copier's verify pass catches what landed before. Writers start unfenced
 * (see Fences).
 */
@JCStressTest
@Description("One actor makes white concurrent objects persistent while the other increments an"
    + " AtomicLong, puts into a ConcurrentHashMap, offers to a ConcurrentLinkedQueue, sets and"
    + " compare-and-sets an AtomicIntegerArray element and sets an AtomicReference; afterwards"
    + " every replica must equal its object.")
@Outcome(id = "OK", expect = ACCEPTABLE, desc = "Objects persistent, replicas agree with every write.")
@Outcome(expect = FORBIDDEN, desc = "A write was lost from a replica, or an object lacks one.")
@State
public class AtomicVsPersistTest {
  final Holder holder = Holder.persistent();
  final AtomicLong counter = new AtomicLong();
  final ConcurrentHashMap<Integer, Object> map = new ConcurrentHashMap<>();
  final ConcurrentLinkedQueue<Object> queue = new ConcurrentLinkedQueue<>();
  final AtomicIntegerArray ints = new AtomicIntegerArray(3);
  final AtomicReference<Object> ref = new AtomicReference<>();
  Node n;

  @Actor
  public void persist() {
    holder.right = new Object[] {counter, map, queue, ints, ref};
  }

  @Actor
  public void write() {
    counter.incrementAndGet();
    counter.addAndGet(5);
    n = new Node(7);
    map.put(3, n);
    queue.offer("q");
    ints.set(1, 9);
    ints.compareAndSet(1, 9, 10);
    ref.set(n);
  }

  @Arbiter
  public void check(L_Result r) {
    r.r1 = Check.replicas(
        holder.named(new Check.Names()).add("counter", counter).add("map", map).add("queue", queue)
            .add("ints", ints).add("ref", ref).add("n", n),
        holder);
    holder.release();
    Fences.lower();
  }
}
