package kioku.bench.persist;

/** An object with an int, a long and a reference field (writes). */
final class Cell {
  int i;
  long l;
  Object r;
}
