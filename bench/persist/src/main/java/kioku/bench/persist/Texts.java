package kioku.bench.persist;

import java.nio.charset.StandardCharsets;
import java.util.Random;

/** Deterministic generated inputs: words with a skewed (Zipf-like) frequency, and text. */
final class Texts {
  private Texts() {}

  /** A vocabulary of {@code size} distinct pseudo-words. */
  static String[] vocabulary(int size, long seed) {
    Random r = new Random(seed);
    String[] v = new String[size];
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < size; i++) {
      b.setLength(0);
      int len = 2 + r.nextInt(9);
      for (int k = 0; k < len; k++) b.append((char) ('a' + r.nextInt(26)));
      b.append(i); // distinct
      v[i] = b.toString();
    }
    return v;
  }

  /** {@code n} words drawn from the vocabulary, low indices far more often. */
  static String[] words(String[] vocabulary, int n, long seed) {
    Random r = new Random(seed);
    String[] w = new String[n];
    for (int i = 0; i < n; i++) {
      double u = r.nextDouble();
      int idx = (int) (vocabulary.length * u * u * u);
      w[i] = vocabulary[Math.min(idx, vocabulary.length - 1)];
    }
    return w;
  }

  /** About {@code bytes} of ASCII text: words, spaces, punctuation and line breaks. */
  static byte[] text(int bytes, long seed) {
    String[] voc = vocabulary(4000, seed);
    Random r = new Random(seed + 1);
    StringBuilder b = new StringBuilder(bytes + 64);
    int line = 0;
    while (b.length() < bytes) {
      double u = r.nextDouble();
      String w = voc[(int) (voc.length * u * u * u)];
      b.append(w);
      line += w.length() + 1;
      if (r.nextInt(12) == 0) b.append(r.nextBoolean() ? ',' : '.');
      if (line > 72) {
        b.append('\n');
        line = 0;
      } else {
        b.append(' ');
      }
    }
    b.setLength(bytes);
    return b.toString().getBytes(StandardCharsets.US_ASCII);
  }
}
