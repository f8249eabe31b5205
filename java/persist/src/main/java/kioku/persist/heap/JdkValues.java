package kioku.persist.heap;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

/**
 * JDK classes whose objects never change once constructed: the value classes of a domain model
 * (BigDecimal, BigInteger, java.time, UUID, Optional) and the immutable and wrapping
 * collections (List.of and its kin, Collections.unmodifiable*, synchronized*, singleton*). They
 * can be persistent without their code being instrumented: nothing writes their fields after
 * the constructor, which runs before anything can make the object persistent. A wrapper's
 * contents are the wrapped collection, persistent (and instrumented) in its own right.
 *
 * <p>Fields that only cache a derived value (BigDecimal's precision and string, an unmodifiable
 * map's views) are written later, so they are not replicated: they come back empty and are
 * computed again on use. Every other instance field must be final; a JDK whose class has a
 * mutable field not listed here gets the class refused rather than persisted wrongly.
 *
 * <p>java.time's region zones (ZoneRegion) are not here: they come back through ZoneId.of
 * (see Canonicals), never with their rules.
 */
final class JdkValues {
  private JdkValues() {}

  private static final Set<String> VIEW_CACHES = Set.of("keySet", "entrySet", "values");

  /** Binary class name → the cache fields not replicated. */
  private static final Map<String, Set<String>> IMMUTABLE = build();

  private static Map<String, Set<String>> build() {
    Map<String, Set<String>> m = new HashMap<>();
    m.put("java.math.BigInteger",
        Set.of("bitCountPlusOne", "bitLengthPlusOne", "lowestSetBitPlusTwo", "firstNonzeroIntNumPlusTwo"));
    m.put("java.math.BigDecimal", Set.of("precision", "stringCache"));
    for (String c : new String[] {
        "java.math.MathContext", "java.util.UUID", "java.util.Optional", "java.util.OptionalInt",
        "java.util.OptionalLong", "java.util.OptionalDouble", "java.time.LocalDate",
        "java.time.LocalTime", "java.time.LocalDateTime", "java.time.Instant", "java.time.Duration",
        "java.time.Period", "java.time.ZoneOffset", "java.time.ZonedDateTime",
        "java.time.OffsetDateTime", "java.time.OffsetTime", "java.time.Year", "java.time.YearMonth",
        "java.time.MonthDay",
        "java.util.ImmutableCollections$List12", "java.util.ImmutableCollections$ListN",
        "java.util.ImmutableCollections$SubList", "java.util.ImmutableCollections$Set12",
        "java.util.ImmutableCollections$SetN", "java.util.ImmutableCollections$Map1",
        "java.util.ImmutableCollections$MapN",
        "java.util.Collections$UnmodifiableCollection", "java.util.Collections$UnmodifiableSet",
        "java.util.Collections$UnmodifiableSortedSet", "java.util.Collections$UnmodifiableNavigableSet",
        "java.util.Collections$UnmodifiableList", "java.util.Collections$UnmodifiableRandomAccessList",
        "java.util.Collections$UnmodifiableSortedMap", "java.util.Collections$UnmodifiableNavigableMap",
        "java.util.Collections$UnmodifiableMap$UnmodifiableEntrySet",
        "java.util.Collections$SynchronizedCollection", "java.util.Collections$SynchronizedSet",
        "java.util.Collections$SynchronizedSortedSet", "java.util.Collections$SynchronizedNavigableSet",
        "java.util.Collections$SynchronizedList", "java.util.Collections$SynchronizedRandomAccessList",
        "java.util.Collections$SynchronizedSortedMap", "java.util.Collections$SynchronizedNavigableMap",
        "java.util.Collections$SingletonList", "java.util.Collections$SingletonSet",
        "java.util.Collections$ReverseComparator2"}) {
      m.put(c, Set.of());
    }
    for (String c : new String[] {
        "java.util.Collections$UnmodifiableMap", "java.util.Collections$SynchronizedMap",
        "java.util.Collections$SingletonMap"}) {
      m.put(c, VIEW_CACHES);
    }
    return Map.copyOf(m);
  }

  /** Whether {@code k} (a JDK class) is one of these. */
  static boolean isImmutable(Class<?> k) {
    return IMMUTABLE.containsKey(k.getName());
  }

  /** The cache fields of {@code k} that are not replicated (empty if none or not listed). */
  static Set<String> caches(Class<?> k) {
    return IMMUTABLE.getOrDefault(k.getName(), Set.of());
  }

  /**
   * Null if every instance field of {@code k} (one of these) is final or a listed cache; else
   * why the class cannot be persistent in this JDK.
   */
  static String refusalOf(Class<?> k) {
    Set<String> caches = caches(k);
    for (Field f : k.getDeclaredFields()) {
      int m = f.getModifiers();
      if (Modifier.isStatic(m) || Modifier.isFinal(m) || caches.contains(f.getName())) continue;
      return k.getName() + " has a mutable field " + f.getName() + " in this JDK, which kioku"
          + " does not know: it cannot be persistent; report this as a kioku bug";
    }
    return null;
  }
}
