package kioku.bench.persist;

/** A linked-list node (reads). */
final class Node {
  final int value;
  Node next;

  Node(int value, Node next) {
    this.value = value;
    this.next = next;
  }
}
