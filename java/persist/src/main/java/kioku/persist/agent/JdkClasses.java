package kioku.persist.agent;

import java.util.List;
import java.util.Set;

/**
 * The JDK classes whose writes the agent intercepts by retransformation: the collection
 * implementations the runtime may make persistent, and the helpers that write into their
 * arrays (sorting, copying, filling). Only boot-loader classes of these names qualify.
 */
final class JdkClasses {
  private JdkClasses() {}

  /** Classes supported by name (their nested classes are not, unless listed below). */
  static final Set<String> TOP_LEVEL =
      Set.of(
          "java/util/AbstractCollection",
          "java/util/AbstractList",
          "java/util/AbstractSequentialList",
          "java/util/AbstractMap",
          "java/util/AbstractSet",
          "java/util/ArrayList",
          "java/util/LinkedList",
          "java/util/ArrayDeque",
          "java/util/HashMap",
          "java/util/LinkedHashMap",
          "java/util/TreeMap",
          "java/util/HashSet",
          "java/util/LinkedHashSet",
          "java/util/TreeSet",
          "java/util/AbstractQueue",
          "java/util/PriorityQueue",
          "java/util/EnumMap",
          "java/util/EnumSet",
          "java/util/RegularEnumSet",
          "java/util/JumboEnumSet",
          "java/util/Arrays",
          "java/util/TimSort",
          "java/util/ComparableTimSort",
          "java/util/DualPivotQuicksort",
          "java/util/ArraysParallelSortHelpers",
          "java/util/Collections");

  /**
   * Classes whose nested classes ({@code Name$...}) are supported too: the collections' nodes,
   * views and iterators; Arrays.asList's list; the parallel sorts' tasks, which write into the
   * array being sorted.
   */
  static final List<String> WITH_NESTED =
      List.of(
          "java/util/ArrayList",
          "java/util/LinkedList",
          "java/util/ArrayDeque",
          "java/util/HashMap",
          "java/util/LinkedHashMap",
          "java/util/TreeMap",
          "java/util/PriorityQueue",
          "java/util/EnumMap",
          "java/util/RegularEnumSet",
          "java/util/JumboEnumSet",
          "java/util/Arrays",
          "java/util/DualPivotQuicksort",
          "java/util/ArraysParallelSortHelpers");

  static boolean isSupported(String internalName) {
    if (TOP_LEVEL.contains(internalName)) return true;
    for (String outer : WITH_NESTED) {
      if (internalName.length() > outer.length()
          && internalName.startsWith(outer)
          && internalName.charAt(outer.length()) == '$') {
        return true;
      }
    }
    return false;
  }
}
