package kioku.examples;

import java.util.ArrayList;
import java.util.SplittableRandom;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * A bank whose threads move money between accounts, each transfer one atomic block, killed at
 * random moments and started again (BankKillIT). Every start checks the recovered state:
 *
 * <ul>
 *   <li>the balances sum to what the bank started with;
 *   <li>the journal has one entry per transfer the counter counts;
 *   <li>replaying the journal from the opening balances gives the balances;
 *   <li>no acknowledged transfer is lost: the counter is at least the last "ack N" the run before
 *       printed (a thread prints it after its block returned).
 * </ul>
 *
 * A transfer locks its two accounts (in id order), moves the money, lets go of them, then locks
 * the journal to append to it and count — all in one atomic block that does not hold one lock
 * for its whole length, so blocks of different threads overlap on the same data (the case
 * issue 13 lost transfers in). Arguments: threads, accounts, and optionally how many more
 * transfers to make before stopping (default: until killed or the bank's end). Output:
 * "recovered counter=N", then "ack N" lines, "done ..." at a stop; "INCONSISTENT ..." and
 * exit 3 if a check fails.
 */
public class Bank {
  static final long OPENING = 1_000;
  /** Transfers the bank stops at (the journal is replayed at every start). */
  static final int MAX_TRANSFERS = 150_000;

  public static final class Account {
    final int id;
    long balance = OPENING;

    Account(int id) {
      this.id = id;
    }
  }

  public static final class Transfer {
    int from;
    int to;
    long amount;
  }

  public static final class State {
    ArrayList<Account> accounts = new ArrayList<>();
    ArrayList<Transfer> journal = new ArrayList<>();
    long counter;
  }

  @DurableRoot static State state;

  public static void main(String[] args) throws Exception {
    int threads = Integer.parseInt(args[0]);
    int accounts = Integer.parseInt(args[1]);
    if (state == null) {
      State s = new State();
      for (int i = 0; i < accounts; i++) s.accounts.add(new Account(i));
      state = s;
    }
    State s = state;
    String problem = check(s);
    if (problem != null) {
      System.out.println("INCONSISTENT " + problem);
      System.out.flush();
      System.exit(3);
    }
    System.out.println("recovered counter=" + s.counter);
    System.out.flush();
    long stopAt = args.length > 2 ? s.counter + Long.parseLong(args[2]) : MAX_TRANSFERS;
    Thread[] workers = new Thread[threads];
    for (int t = 0; t < threads; t++) {
      long seed = System.nanoTime() + t;
      workers[t] = new Thread(() -> work(s, new SplittableRandom(seed), stopAt), "teller-" + t);
      workers[t].start();
    }
    for (Thread w : workers) w.join();
    System.out.println("done counter=" + s.counter + " early=" + KiokuPersist.stats().earlyCommits());
    System.out.flush();
  }

  private static void work(State s, SplittableRandom rnd, long stopAt) {
    int n = s.accounts.size();
    for (int i = 0; ; i++) {
      int from = rnd.nextInt(n);
      int to = rnd.nextInt(n - 1);
      if (to >= from) to++;
      long amount = 1 + rnd.nextInt(50);
      long[] seen = new long[1];
      Account a = s.accounts.get(Math.min(from, to));
      Account b = s.accounts.get(Math.max(from, to));
      int f = from;
      int t = to;
      synchronized (s.journal) {
        if (s.counter >= Math.min(stopAt, MAX_TRANSFERS)) return;
      }
      KiokuPersist.atomic(() -> {
        synchronized (a) {
          synchronized (b) {
            Account src = a.id == f ? a : b;
            Account dst = a.id == f ? b : a;
            src.balance -= amount;
            dst.balance += amount;
          }
        }
        synchronized (s.journal) {
          Transfer x = new Transfer();
          x.from = f;
          x.to = t;
          x.amount = amount;
          s.journal.add(x);
          s.counter++;
          seen[0] = s.counter;
        }
      });
      if (i % 8 == 7) {
        try {
          Thread.sleep(1); // a pace at which kills land mid-run, not after the bank's end
        } catch (InterruptedException e) {
          return;
        }
      }
      if (i % 64 == 0) {
        synchronized (System.out) {
          System.out.println("ack " + seen[0]);
          System.out.flush();
        }
      }
    }
  }

  /** Null if the state is one the bank can be in, else what is wrong. */
  static String check(State s) {
    int n = s.accounts.size();
    long sum = 0;
    for (Account a : s.accounts) sum += a.balance;
    if (sum != n * OPENING) return "balances sum to " + sum + ", want " + n * OPENING;
    if (s.journal.size() != s.counter) return "journal has " + s.journal.size() + " entries, counter " + s.counter;
    long[] replay = new long[n];
    java.util.Arrays.fill(replay, OPENING);
    for (Transfer x : s.journal) {
      replay[x.from] -= x.amount;
      replay[x.to] += x.amount;
    }
    for (int i = 0; i < n; i++) {
      if (replay[i] != s.accounts.get(i).balance) {
        return "account " + i + " holds " + s.accounts.get(i).balance + ", the journal says " + replay[i];
      }
    }
    return null;
  }
}
