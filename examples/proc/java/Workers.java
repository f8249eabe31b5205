/*
 * Workers — a multi-threaded Java program for kioku's process tests, run by a JVM with default
 * flags (no kioku library, no -XX options). THREADS worker threads do ROUNDS rounds of
 * deterministic work on objects they allocate (lists, maps, strings: the garbage collector
 * runs), publish each round's result under a shared lock, and meet at a barrier whose action
 * prints the round's digest; a producer/consumer pair hands numbers through a
 * LinkedBlockingQueue, and a wait/notify counter is advanced by every thread. The output is the
 * same on every run, however the threads are scheduled.
 *
 * Usage: java -cp DIR Workers THREADS ROUNDS WORK
 */
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

public final class Workers {
    private static long[] results;
    private static final ReentrantLock lock = new ReentrantLock();
    private static final AtomicLong atomicSum = new AtomicLong();
    private static final Object monitor = new Object();
    private static long monitorCount;

    /** One round of one thread: builds and hashes collections; the GC collects them. */
    static long work(int thread, int round, int size) {
        List<String> words = new ArrayList<>();
        Map<Integer, Long> counts = new HashMap<>();
        long x = 0x9e3779b97f4a7c15L * (round + 1) + thread;
        for (int i = 0; i < size; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            words.add(Long.toHexString(x & 0xffffff));
            counts.merge((int) (x & 1023), 1L, Long::sum);
        }
        long h = 1469598103934665603L;
        for (String w : words) {
            h = (h ^ w.hashCode()) * 1099511628211L;
        }
        for (Map.Entry<Integer, Long> e : counts.entrySet()) {
            h = (h ^ (e.getKey() * 31L + e.getValue())) * 1099511628211L;
        }
        return h;
    }

    public static void main(String[] args) throws Exception {
        int threads = Integer.parseInt(args[0]);
        int rounds = Integer.parseInt(args[1]);
        int size = Integer.parseInt(args[2]);
        results = new long[threads];
        long[] digest = {1469598103934665603L};
        CyclicBarrier barrier = new CyclicBarrier(threads, () -> {
            long d = digest[0];
            for (long r : results) {
                d = (d ^ r) * 1099511628211L;
            }
            digest[0] = d;
            int round = (int) (atomicSum.get() / threads) - 1;
            if ((round + 1) % 10 == 0) {
                System.out.printf("round %d digest %016x%n", round + 1, d);
                System.out.flush();
            }
        });
        LinkedBlockingQueue<Long> queue = new LinkedBlockingQueue<>(16);
        long[] consumed = {0};
        Thread consumer = new Thread(() -> {
            try {
                for (;;) {
                    long v = queue.take();
                    if (v < 0) {
                        return;
                    }
                    consumed[0] = consumed[0] * 31 + v;
                }
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        }, "consumer");
        consumer.start();
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int me = t;
            Thread th = new Thread(() -> {
                try {
                    for (int round = 0; round < rounds; round++) {
                        long r = work(me, round, size);
                        lock.lock();
                        try {
                            results[me] = r;
                        } finally {
                            lock.unlock();
                        }
                        synchronized (monitor) {
                            monitorCount++;
                            monitor.notifyAll();
                        }
                        if (me == 0) {
                            queue.put((long) round);
                        }
                        atomicSum.incrementAndGet();
                        barrier.await();
                    }
                } catch (InterruptedException | BrokenBarrierException e) {
                    throw new RuntimeException(e);
                }
            }, "worker-" + t);
            workers.add(th);
            th.start();
        }
        synchronized (monitor) {
            while (monitorCount < (long) threads * rounds) {
                monitor.wait();
            }
        }
        for (Thread th : workers) {
            th.join();
        }
        queue.put(-1L);
        consumer.join();
        System.out.printf("done: %d threads, %d rounds, digest %016x, consumed %016x%n",
                threads, rounds, digest[0], consumed[0]);
    }
}
