#!/usr/bin/env python3
"""Reference for pi_spigot: FNV-1a 64 of the first N decimal digits of pi ("31415..."),
computed with Machin's formula in Python integers. Usage: pi_ref.py N [N...]"""
import sys
sys.set_int_max_str_digits(0)
def arctan_inv(x, one):
    s = t = one // x; x2 = x*x; n = 1; sign = -1
    while t:
        t //= x2; n += 2
        s += sign * (t // n); sign = -sign
    return s
for N in map(int, sys.argv[1:]):
    one = 10**(N+20)
    d = str(4*(4*arctan_inv(5, one) - arctan_inv(239, one)))[:N]
    h = 0xcbf29ce484222325
    for c in d.encode():
        h ^= c; h = (h*0x100000001b3) & 0xffffffffffffffff
    print(N, "%016x" % h)
