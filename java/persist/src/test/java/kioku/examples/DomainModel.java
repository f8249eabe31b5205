package kioku.examples;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.MathContext;
import java.math.RoundingMode;
import java.time.DayOfWeek;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.MonthDay;
import java.time.OffsetDateTime;
import java.time.OffsetTime;
import java.time.Period;
import java.time.Year;
import java.time.YearMonth;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import kioku.persist.DurableRoot;
import kioku.persist.KiokuPersist;

/**
 * A domain model of the value types Java programs use — records, BigDecimal and BigInteger,
 * java.time, UUID, Optional, List.of and its kin, unmodifiable and synchronized wrappers,
 * EnumMap and EnumSet, PriorityQueue, enums as keys of hash maps and sets — kept in a
 * persistent store, run under the agent and SIGKILLed (DomainModelIT).
 *
 * <p>Every order is a function of its number ({@link #order}), so a check can say exactly what
 * each must hold. Modes: {@code add N} adds orders until there are N, each in one atomic block
 * that also updates the indexes and the counter, printing "ack i" after each (it checks the
 * store first, as {@code check} does); {@code check} checks everything and prints "ok
 * orders=N", or "INCONSISTENT ..." and exits 3.
 */
public class DomainModel {
  public enum Status {
    OPEN,
    PAID,
    SHIPPED,
    CLOSED
  }

  public record Money(BigDecimal amount, String currency) {
    public Money {
      if (amount.signum() < 0) throw new IllegalArgumentException("negative " + amount);
    }
  }

  public record Line(String sku, int quantity, Money price, Optional<String> note) {}

  /** A record holding a mutable list: identity and sharing must survive too. */
  public record Tagged(String name, List<String> tags) {}

  public static final class Order {
    long number;
    UUID id;
    Status status;
    LocalDate date;
    LocalTime time;
    LocalDateTime created;
    Instant stamp;
    Duration ttl;
    Period period;
    ZonedDateTime due;
    OffsetDateTime sent;
    OffsetTime cutoff;
    Year year;
    YearMonth month;
    MonthDay anniversary;
    BigInteger big;
    BigDecimal total;
    MathContext context;
    Optional<String> coupon;
    OptionalInt priority;
    List<Line> lines;
    Set<String> labels;
    Map<String, Integer> attributes;
    EnumMap<Status, Instant> history;
    EnumSet<DayOfWeek> deliveryDays;
    List<String> readOnly;
    Tagged tagged;
  }

  /** Orders by number, highest first. */
  public static final class NewestFirst implements Comparator<Order> {
    @Override
    public int compare(Order a, Order b) {
      return Long.compare(b.number, a.number);
    }
  }

  public static final class Store {
    long counter;
    HashMap<UUID, Order> byId = new HashMap<>();
    TreeMap<Long, Order> byNumber = new TreeMap<>();
    PriorityQueue<Order> queue = new PriorityQueue<>(new NewestFirst());
    Map<String, Long> synchronizedCounts = Collections.synchronizedMap(new LinkedHashMap<>());
    /** Enum keys hash by identity: their buckets move at every start. */
    HashMap<Status, List<Long>> byStatus = new HashMap<>();
    HashSet<Status> statusesSeen = new HashSet<>();
    HashSet<DayOfWeek> days = new HashSet<>();
    Set<Status> immutableStatuses = Set.of(Status.OPEN, Status.PAID, Status.SHIPPED);
    Map<Status, String> immutableNames = Map.of(Status.OPEN, "open", Status.CLOSED, "closed", Status.PAID, "paid");
    List<Object> shared = new ArrayList<>();
    Class<?> kind = Status.class;
  }

  @DurableRoot static Store store;

  static final ZoneId PARIS = ZoneId.of("Europe/Paris");

  public static void main(String[] args) {
    switch (args[0]) {
      case "add" -> add(Integer.parseInt(args[1]));
      case "check" -> {
        String why = check();
        if (why != null) {
          System.out.println("INCONSISTENT " + why);
          System.out.flush();
          System.exit(3);
        }
        System.out.println("ok orders=" + store.counter);
      }
      default -> throw new IllegalArgumentException(args[0]);
    }
    System.out.flush();
  }

  private static void add(int until) {
    if (store != null) {
      String why = check();
      if (why != null) {
        System.out.println("INCONSISTENT " + why);
        System.out.flush();
        System.exit(3);
      }
    }
    if (store == null) {
      Store s = new Store();
      s.shared.add(List.of());
      s.shared.add(Optional.empty());
      s.shared.add(BigDecimal.ZERO);
      s.shared.add(BigDecimal.ONE);
      s.shared.add(BigInteger.TEN);
      s.shared.add(ZoneOffset.UTC);
      s.shared.add(Collections.emptyMap());
      store = s;
    }
    Store s = store;
    System.out.println("start counter=" + s.counter);
    System.out.flush();
    while (s.counter < until) {
      long n = s.counter + 1;
      KiokuPersist.atomic(() -> {
        Order o = order(n);
        s.byId.put(o.id, o);
        s.byNumber.put(n, o);
        s.queue.add(o);
        s.synchronizedCounts.merge(o.status.name(), 1L, Long::sum);
        s.byStatus.computeIfAbsent(o.status, k -> new ArrayList<>()).add(n);
        s.statusesSeen.add(o.status);
        s.days.addAll(o.deliveryDays);
        s.counter = n;
      });
      System.out.println("ack " + n);
      System.out.flush();
    }
    System.out.println("done " + s.counter);
  }

  /** Order number n, the same in every run. */
  static Order order(long n) {
    Order o = new Order();
    o.number = n;
    o.id = new UUID(0x1234_5678_9abcL * n, ~n);
    o.status = Status.values()[(int) (n % Status.values().length)];
    o.date = LocalDate.of(2020, 1, 1).plusDays(n);
    o.time = LocalTime.of((int) (n % 24), (int) (n % 60), (int) (n * 7 % 60), (int) (n * 1000));
    o.created = LocalDateTime.of(o.date, o.time);
    o.stamp = Instant.ofEpochSecond(1_600_000_000L + n * 3600, n);
    o.ttl = Duration.ofMinutes(n).plusNanos(n);
    o.period = Period.of((int) (n % 3), (int) (n % 12), (int) (n % 28));
    o.due = ZonedDateTime.of(o.created.plusDays(3), PARIS);
    o.sent = OffsetDateTime.of(o.created, ZoneOffset.ofHours((int) (n % 12)));
    o.cutoff = OffsetTime.of(o.time, ZoneOffset.UTC);
    o.year = Year.of(2000 + (int) (n % 50));
    o.month = YearMonth.of(2021, 1 + (int) (n % 12));
    o.anniversary = MonthDay.of(1 + (int) (n % 12), 1 + (int) (n % 28));
    o.big = BigInteger.TWO.pow(64 + (int) (n % 64)).add(BigInteger.valueOf(n));
    List<Line> lines = new ArrayList<>();
    BigDecimal total = BigDecimal.ZERO;
    for (int i = 0; i < 1 + n % 3; i++) {
      BigDecimal price = new BigDecimal(BigInteger.valueOf(n * 100 + i), 2);
      lines.add(new Line("sku-" + n + "-" + i, i + 1, new Money(price, "EUR"),
          i == 0 ? Optional.of("first") : Optional.empty()));
      total = total.add(price.multiply(BigDecimal.valueOf(i + 1)));
    }
    o.lines = List.copyOf(lines);
    o.total = total.setScale(2, RoundingMode.HALF_EVEN);
    o.context = n % 2 == 0 ? MathContext.DECIMAL64 : new MathContext((int) n % 30 + 1, RoundingMode.HALF_UP);
    o.coupon = n % 5 == 0 ? Optional.empty() : Optional.of("C" + n);
    o.priority = n % 4 == 0 ? OptionalInt.empty() : OptionalInt.of((int) n);
    o.labels = n % 2 == 0 ? Set.of("a" + n, "b" + n, "c" + n) : Set.of("solo" + n);
    o.attributes = n % 3 == 0 ? Map.of() : Map.of("weight", (int) n, "volume", (int) (2 * n));
    o.history = new EnumMap<>(Status.class);
    for (Status st : Status.values()) {
      if (st.ordinal() <= o.status.ordinal()) o.history.put(st, o.stamp.plusSeconds(st.ordinal()));
    }
    o.deliveryDays = EnumSet.noneOf(DayOfWeek.class);
    for (DayOfWeek d : DayOfWeek.values()) if ((n >> d.ordinal() & 1) != 0) o.deliveryDays.add(d);
    o.readOnly = Collections.unmodifiableList(new ArrayList<>(List.of("r" + n, "o" + n)));
    o.tagged = new Tagged("t" + n, new ArrayList<>(List.of("x", "y" + n)));
    return o;
  }

  /** Null if the store holds exactly orders 1..counter as {@link #order} makes them. */
  static String check() {
    Store s = store;
    if (s == null) return "no store";
    long n = s.counter;
    if (s.byId.size() != n || s.byNumber.size() != n || s.queue.size() != n) {
      return "sizes " + s.byId.size() + "/" + s.byNumber.size() + "/" + s.queue.size() + " for counter " + n;
    }
    Map<Status, Long> perStatus = new EnumMap<>(Status.class);
    Set<DayOfWeek> days = EnumSet.noneOf(DayOfWeek.class);
    for (long i = 1; i <= n; i++) {
      Order want = order(i);
      Order got = s.byNumber.get(i);
      if (got == null) return "order " + i + " missing from byNumber";
      if (s.byId.get(want.id) != got) return "order " + i + " not found by its UUID";
      String diff = differs(want, got);
      if (diff != null) return "order " + i + ": " + diff;
      perStatus.merge(want.status, 1L, Long::sum);
      days.addAll(want.deliveryDays);
      if (!s.byStatus.get(want.status).contains(i)) return "byStatus lacks " + i;
    }
    // The queue gives the orders newest first.
    PriorityQueue<Order> q = new PriorityQueue<>(s.queue);
    for (long i = n; i >= 1; i--) {
      Order o = q.poll();
      if (o == null || o.number != i) return "queue gave " + (o == null ? null : o.number) + " for " + i;
    }
    for (Status st : Status.values()) {
      long want = perStatus.getOrDefault(st, 0L);
      Long counted = s.synchronizedCounts.get(st.name());
      if (want != (counted == null ? 0 : counted)) return "count of " + st + " " + counted + " != " + want;
      List<Long> numbers = s.byStatus.get(st);
      if (want != (numbers == null ? 0 : numbers.size())) return "byStatus." + st + " " + numbers;
      if (s.statusesSeen.contains(st) != want > 0) return "statusesSeen " + s.statusesSeen;
    }
    if (!s.days.equals(days) || !days.containsAll(s.days)) return "days " + s.days + " != " + days;
    for (DayOfWeek d : days) if (!s.days.contains(d)) return "days lacks " + d;
    if (!s.immutableStatuses.contains(Status.PAID) || s.immutableStatuses.contains(Status.CLOSED)) {
      return "Set.of of enums: " + s.immutableStatuses;
    }
    if (!"closed".equals(s.immutableNames.get(Status.CLOSED)) || s.immutableNames.get(Status.SHIPPED) != null) {
      return "Map.of of enums: " + s.immutableNames;
    }
    if (s.kind != Status.class) return "class " + s.kind;
    Object[] shared = {List.of(), Optional.empty(), BigDecimal.ZERO, BigDecimal.ONE, BigInteger.TEN,
        ZoneOffset.UTC, Collections.emptyMap()};
    for (int i = 0; i < shared.length; i++) {
      if (s.shared.get(i) != shared[i]) return "shared instance " + i + " is a copy: " + s.shared.get(i);
    }
    return null;
  }

  private static String differs(Order a, Order b) {
    Object[][] fields = {
      {"number", a.number, b.number}, {"id", a.id, b.id}, {"status", a.status, b.status},
      {"date", a.date, b.date}, {"time", a.time, b.time}, {"created", a.created, b.created},
      {"stamp", a.stamp, b.stamp}, {"ttl", a.ttl, b.ttl}, {"period", a.period, b.period},
      {"due", a.due, b.due}, {"sent", a.sent, b.sent}, {"cutoff", a.cutoff, b.cutoff},
      {"year", a.year, b.year}, {"month", a.month, b.month}, {"anniversary", a.anniversary, b.anniversary},
      {"big", a.big, b.big}, {"total", a.total, b.total}, {"context", a.context, b.context},
      {"coupon", a.coupon, b.coupon}, {"priority", a.priority, b.priority}, {"lines", a.lines, b.lines},
      {"labels", a.labels, b.labels}, {"attributes", a.attributes, b.attributes},
      {"history", a.history, b.history}, {"deliveryDays", a.deliveryDays, b.deliveryDays},
      {"readOnly", a.readOnly, b.readOnly}, {"tagged", a.tagged, b.tagged},
    };
    for (Object[] f : fields) {
      if (!java.util.Objects.equals(f[1], f[2])) return f[0] + ": " + f[2] + " != " + f[1];
    }
    // Values must behave, not only compare equal.
    if (!b.due.getZone().equals(PARIS) || !b.due.toInstant().equals(a.due.toInstant())) return "zone";
    if (b.total.precision() != a.total.precision() || !b.total.toString().equals(a.total.toString())) {
      return "total " + b.total;
    }
    if (b.big.bitLength() != a.big.bitLength() || b.big.bitCount() != a.big.bitCount()) return "big bits";
    if (!b.labels.containsAll(a.labels) || !b.labels.contains(a.labels.iterator().next())) return "labels lookup";
    for (Map.Entry<String, Integer> e : a.attributes.entrySet()) {
      if (!e.getValue().equals(b.attributes.get(e.getKey()))) return "attributes lookup " + e.getKey();
    }
    if (b.history.get(a.status) == null || b.deliveryDays.size() != a.deliveryDays.size()) return "enum collections";
    if (b.coupon.isPresent() && b.coupon.get().hashCode() != a.coupon.get().hashCode()) return "coupon hash";
    if (a.coupon.isEmpty() && (Object) b.coupon != Optional.empty()) return "Optional.empty() is a copy";
    try {
      b.readOnly.add("x");
      return "readOnly accepted an add";
    } catch (UnsupportedOperationException expected) {
      // still unmodifiable
    }
    return null;
  }
}
