package kioku.stress;

/** Volatile fields: the runtime writes their replica first, under a per-object lock. */
public final class VolatileBox {
  volatile int vi;
  volatile long vl;
  volatile double vd;
  volatile Object vr;
  int plain;
}
