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
          "java/util/Collections",
          "java/util/concurrent/ConcurrentHashMap",
          "java/util/concurrent/ConcurrentLinkedQueue",
          "java/util/concurrent/CopyOnWriteArrayList",
          "java/util/concurrent/CopyOnWriteArraySet",
          "java/util/concurrent/atomic/AtomicInteger",
          "java/util/concurrent/atomic/AtomicLong",
          "java/util/concurrent/atomic/AtomicBoolean",
          "java/util/concurrent/atomic/AtomicReference",
          "java/util/concurrent/atomic/AtomicIntegerArray",
          "java/util/concurrent/atomic/AtomicLongArray",
          "java/util/concurrent/atomic/AtomicReferenceArray",
          "java/util/concurrent/atomic/Striped64",
          "java/util/concurrent/atomic/Striped64$Cell",
          "java/util/concurrent/atomic/LongAdder",
          "java/util/concurrent/atomic/DoubleAdder");

  /**
   * Nested classes supported one by one (their outer class has many others, such as
   * ConcurrentHashMap's fork-join tasks, which never hold a map's state).
   */
  static final Set<String> NESTED =
      Set.of(
          "java/util/concurrent/ConcurrentHashMap$Node",
          "java/util/concurrent/ConcurrentHashMap$TreeNode",
          "java/util/concurrent/ConcurrentHashMap$TreeBin",
          "java/util/concurrent/ConcurrentHashMap$ForwardingNode",
          "java/util/concurrent/ConcurrentHashMap$ReservationNode",
          "java/util/concurrent/ConcurrentHashMap$CounterCell",
          "java/util/concurrent/ConcurrentHashMap$CollectionView",
          "java/util/concurrent/ConcurrentHashMap$KeySetView",
          "java/util/concurrent/ConcurrentHashMap$ValuesView",
          "java/util/concurrent/ConcurrentHashMap$EntrySetView",
          "java/util/concurrent/ConcurrentHashMap$Traverser",
          "java/util/concurrent/ConcurrentHashMap$BaseIterator",
          "java/util/concurrent/ConcurrentHashMap$KeyIterator",
          "java/util/concurrent/ConcurrentHashMap$ValueIterator",
          "java/util/concurrent/ConcurrentHashMap$EntryIterator",
          "java/util/concurrent/ConcurrentHashMap$MapEntry",
          "java/util/concurrent/ConcurrentLinkedQueue$Node",
          "java/util/concurrent/ConcurrentLinkedQueue$Itr",
          "java/util/concurrent/CopyOnWriteArrayList$COWIterator",
          "java/util/concurrent/CopyOnWriteArrayList$COWSubList",
          "java/util/concurrent/CopyOnWriteArrayList$COWSubListIterator");

  /**
   * Whether each writing instance method of the class is made one failure-atomic section. Not
   * in the lock-free classes of java.util.concurrent: every one of their operations publishes
   * its effect with a single atomic write (a node linked, a bin set, a value swapped), so every
   * state a crash can leave is a state of the structure; what a crash can leave behind (a
   * forwarding node of a resize, a size not yet counted) recovery tidies (see
   * heap.ConcurrentMaps). A section would make the threads that share a counter or a table
   * wait for each other. The tree bins of ConcurrentHashMap, rebalanced by many writes under
   * their lock, keep theirs.
   */
  static boolean sectionsPerMethod(String internalName) {
    return !internalName.startsWith("java/util/concurrent/")
        || internalName.equals("java/util/concurrent/ConcurrentHashMap$TreeBin");
  }

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
    if (TOP_LEVEL.contains(internalName) || NESTED.contains(internalName)) return true;
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
