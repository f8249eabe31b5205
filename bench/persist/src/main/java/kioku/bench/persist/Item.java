package kioku.bench.persist;

/** A small object of four 8-byte slots: its replica is 5 words (header + slots). */
final class Item {
  long id;
  int count;
  double price;
  Item next;
}
