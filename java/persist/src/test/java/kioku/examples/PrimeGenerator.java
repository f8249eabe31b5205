package kioku.examples;

import java.util.ArrayList;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * The thesis's prime generator: finds primes one by one and keeps them in persistent objects.
 * Killed at any moment and started again with the same pool, it checks what it recovered and
 * goes on. Run with {@code -javaagent:kioku-persist.jar=pool=primes.pool}.
 *
 * <p>Arguments: the number of primes to reach. Output: "recovered N" at start, "done N" at
 * the end; exit status 3 if the recovered state is inconsistent.
 */
public class PrimeGenerator {
  /** Everything the generator knows, reachable from one root. */
  static final class State {
    long[] primes = new long[16]; // the first `count` primes, in a plain array
    int count;
    long candidate = 2; // the next number to test
    ArrayList<Long> boxed = new ArrayList<>(); // the same primes, in a collection
  }

  @DurableRoot static State state;

  public static void main(String[] args) {
    if (state == null) state = new State();
    State s = state;
    String problem = check(s);
    if (problem != null) {
      System.out.println("INCONSISTENT " + problem);
      System.exit(3);
    }
    System.out.println("recovered " + s.count);
    System.out.flush();
    // "+N": N more primes than recovered.
    int target = args[0].startsWith("+") ? s.count + Integer.parseInt(args[0].substring(1)) : Integer.parseInt(args[0]);
    // A crash between the count and the candidate leaves the candidate on the last prime.
    if (s.count > 0 && s.candidate <= s.primes[s.count - 1]) s.candidate = s.primes[s.count - 1] + 1;
    while (s.count < target) {
      long c = s.candidate;
      if (isPrime(c, s)) {
        if (s.count == s.primes.length) s.primes = java.util.Arrays.copyOf(s.primes, s.count * 2);
        s.primes[s.count] = c; // the element first,
        if (s.boxed.size() == s.count) s.boxed.add(c); // a crash may have added it already
        s.count = s.count + 1; // then the count that publishes it
      }
      s.candidate = c + 1;
    }
    String end = check(s);
    System.out.println(end == null ? "done " + s.count : "INCONSISTENT " + end);
    if (KiokuPersist.isOpen()) KiokuPersist.close();
    System.exit(end == null ? 0 : 3);
  }

  private static boolean isPrime(long c, State s) {
    for (int i = 0; i < s.count; i++) {
      long p = s.primes[i];
      if (p * p > c) return true;
      if (c % p == 0) return false;
    }
    return c >= 2;
  }

  /** Null if the state is one the program can be in, else what is wrong. */
  static String check(State s) {
    if (s.count < 0 || s.count > s.primes.length) return "count " + s.count;
    long last = s.count == 0 ? 1 : s.primes[s.count - 1];
    if (last > Integer.MAX_VALUE / 2) return "last prime " + last;
    // A sieve up to past the last prime: the array must hold exactly the first `count` primes.
    int limit = (int) last + 2 * (int) Math.sqrt(last) + 100;
    java.util.BitSet composite = new java.util.BitSet(limit + 1);
    for (int p = 2; (long) p * p <= limit; p++) {
      if (!composite.get(p)) for (int m = p * p; m <= limit; m += p) composite.set(m);
    }
    int i = 0;
    for (int p = 2; p <= last; p++) {
      if (composite.get(p)) continue;
      if (i >= s.count || s.primes[i] != p) {
        return "primes[" + i + "] = " + (i < s.count ? s.primes[i] : "missing") + ", want " + p;
      }
      i++;
    }
    if (i != s.count) return i + " primes up to " + last + ", count " + s.count;
    long next = last + 1;
    while (next <= limit && composite.get((int) next)) next++;
    // The candidate moves on after the count: it is the last prime, or up to the next one.
    if (s.candidate < last || s.candidate > next) {
      return "candidate " + s.candidate + " after prime " + last;
    }
    // The list is updated between the array and the count: it holds count or count + 1.
    int n = s.boxed.size();
    if (n != s.count && n != s.count + 1) return "list has " + n + " primes, count " + s.count;
    for (int k = 0; k < n; k++) {
      long want = k < s.primes.length ? s.primes[k] : -1;
      if (s.boxed.get(k) != want) return "list[" + k + "] = " + s.boxed.get(k) + ", want " + want;
    }
    return null;
  }


}
