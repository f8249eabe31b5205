//! Arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d), the field
//! ISA-L, Jerasure (w = 8) and most storage codes use; small matrix helpers on top.

use std::sync::OnceLock;

/// The reducing polynomial, without the x^8 term it is 0x1d.
pub const POLY: u16 = 0x11d;

struct Tables {
    exp: [u8; 512],
    log: [u8; 256],
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let mut exp = [0u8; 512];
        let mut log = [0u8; 256];
        let mut x: u16 = 1;
        for (i, e) in exp.iter_mut().enumerate().take(255) {
            *e = x as u8;
            log[x as usize] = i as u8;
            x <<= 1;
            if x & 0x100 != 0 {
                x ^= POLY;
            }
        }
        for i in 255..512 {
            exp[i] = exp[i - 255];
        }
        Tables { exp, log }
    })
}

/// Product of `a` and `b` in GF(2^8).
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    let t = tables();
    t.exp[t.log[a as usize] as usize + t.log[b as usize] as usize]
}

/// Multiplicative inverse of `a` (`a` must not be 0; `inv(0)` returns 0).
#[inline]
pub fn inv(a: u8) -> u8 {
    if a == 0 {
        return 0;
    }
    let t = tables();
    t.exp[255 - t.log[a as usize] as usize]
}

/// The full 256 x 256 product table, `mul_table()[a][b] == mul(a, b)` (64 KiB, built once).
pub fn mul_table() -> &'static [[u8; 256]; 256] {
    static T: OnceLock<Box<[[u8; 256]; 256]>> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = Box::new([[0u8; 256]; 256]);
        for a in 0..256 {
            for b in 0..256 {
                t[a][b] = mul(a as u8, b as u8);
            }
        }
        t
    })
}

/// Expands one coefficient into the 32-byte split-nibble table ISA-L's `ec_init_tables`
/// produces: products with 0..16 (low nibble) followed by products with 0x00,0x10..0xf0.
pub fn nibble_table(c: u8, out: &mut [u8]) {
    let t = &mul_table()[c as usize];
    for n in 0..16usize {
        out[n] = t[n];
        out[16 + n] = t[n << 4];
    }
}

/// Expands a `rows x cols` row-major coefficient matrix into the ISA-L table layout
/// (32 bytes per coefficient, same order as the matrix). Byte-identical to `ec_init_tables`.
pub fn expand_tables(rows: usize, cols: usize, matrix: &[u8]) -> Vec<u8> {
    assert_eq!(matrix.len(), rows * cols);
    let mut out = vec![0u8; 32 * rows * cols];
    for (c, chunk) in matrix.iter().zip(out.chunks_exact_mut(32)) {
        nibble_table(*c, chunk);
    }
    out
}

/// The `m x k` parity part of the systematic Cauchy generator used by kioku:
/// `C[j][i] = 1 / ((k + j) xor i)`, the same matrix as ISA-L's `gf_gen_cauchy1_matrix`
/// (rows k.. of its output). Every square submatrix of a Cauchy matrix is invertible, so
/// `[I; C]` is MDS for every `k + m <= 256`.
pub fn cauchy_parity_matrix(k: usize, m: usize) -> Vec<u8> {
    assert!(k >= 1 && m >= 1 && k + m <= 256);
    let mut a = vec![0u8; m * k];
    for j in 0..m {
        for i in 0..k {
            a[j * k + i] = inv(((k + j) ^ i) as u8);
        }
    }
    a
}

/// Inverts the `n x n` row-major matrix `a` by Gauss-Jordan elimination.
/// Returns `None` when `a` is singular.
pub fn invert(a: &[u8], n: usize) -> Option<Vec<u8>> {
    assert_eq!(a.len(), n * n);
    let mt = mul_table();
    let mut m = a.to_vec();
    let mut out = vec![0u8; n * n];
    for i in 0..n {
        out[i * n + i] = 1;
    }
    for col in 0..n {
        let pivot = (col..n).find(|&r| m[r * n + col] != 0)?;
        if pivot != col {
            for c in 0..n {
                m.swap(pivot * n + c, col * n + c);
                out.swap(pivot * n + c, col * n + c);
            }
        }
        let f = &mt[inv(m[col * n + col]) as usize];
        for c in 0..n {
            m[col * n + c] = f[m[col * n + c] as usize];
            out[col * n + c] = f[out[col * n + c] as usize];
        }
        for r in 0..n {
            let e = m[r * n + col];
            if r == col || e == 0 {
                continue;
            }
            let f = &mt[e as usize];
            for c in 0..n {
                m[r * n + c] ^= f[m[col * n + c] as usize];
                out[r * n + c] ^= f[out[col * n + c] as usize];
            }
        }
    }
    Some(out)
}

/// Product of the row-major `r x n` matrix `a` and `n x c` matrix `b`.
pub fn matmul(a: &[u8], b: &[u8], r: usize, n: usize, c: usize) -> Vec<u8> {
    assert_eq!(a.len(), r * n);
    assert_eq!(b.len(), n * c);
    let mt = mul_table();
    let mut out = vec![0u8; r * c];
    for i in 0..r {
        for t in 0..n {
            let f = &mt[a[i * n + t] as usize];
            for j in 0..c {
                out[i * c + j] ^= f[b[t * c + j] as usize];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_axioms() {
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1, "a={a}");
            assert_eq!(mul(a, 1), a);
            assert_eq!(mul(a, 0), 0);
        }
        // Distributivity on a sample.
        for a in (0..=255u8).step_by(7) {
            for b in (0..=255u8).step_by(11) {
                for c in (0..=255u8).step_by(13) {
                    assert_eq!(mul(a, b ^ c), mul(a, b) ^ mul(a, c));
                    assert_eq!(mul(mul(a, b), c), mul(a, mul(b, c)));
                }
            }
        }
        assert_eq!(mul(2, 0x80), 0x1d);
    }

    #[test]
    fn invert_roundtrip() {
        let n = 9;
        let c = cauchy_parity_matrix(n, n);
        let ci = invert(&c, n).expect("cauchy square is invertible");
        let id = matmul(&c, &ci, n, n, n);
        for r in 0..n {
            for col in 0..n {
                assert_eq!(id[r * n + col], (r == col) as u8);
            }
        }
        assert!(invert(&[1, 1, 1, 1], 2).is_none());
    }
}
