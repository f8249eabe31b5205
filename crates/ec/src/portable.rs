//! kioku's own GF(2^8) region kernels: a table-driven scalar one that runs anywhere and an
//! AVX2 split-nibble one (the same technique ISA-L uses) chosen at run time on x86-64.
//! Both use the ISA-L table layout: 32 bytes per coefficient, low-nibble products then
//! high-nibble products.

use crate::gf;

/// `dst[r] (=|^=) sum_c M[r][c] * src[c]`, scalar. `matrix` is `dsts.len() x srcs.len()`.
pub fn dot_scalar(matrix: &[u8], srcs: &[&[u8]], dsts: &mut [&mut [u8]], accumulate: bool) {
    let mt = gf::mul_table();
    let k = srcs.len();
    for (r, dst) in dsts.iter_mut().enumerate() {
        let row = &matrix[r * k..(r + 1) * k];
        let mut first = !accumulate;
        for (c, src) in srcs.iter().enumerate() {
            let t = &mt[row[c] as usize];
            if first {
                for (d, s) in dst.iter_mut().zip(src.iter()) {
                    *d = t[*s as usize];
                }
                first = false;
            } else {
                for (d, s) in dst.iter_mut().zip(src.iter()) {
                    *d ^= t[*s as usize];
                }
            }
        }
    }
}

/// `dst[r] ^= coef[r] * src`, scalar.
pub fn mad_scalar(coefs: &[u8], src: &[u8], dsts: &mut [&mut [u8]]) {
    let mt = gf::mul_table();
    for (dst, c) in dsts.iter_mut().zip(coefs) {
        let t = &mt[*c as usize];
        for (d, s) in dst.iter_mut().zip(src.iter()) {
            *d ^= t[*s as usize];
        }
    }
}

/// Whether this CPU runs the AVX2 kernels.
pub fn have_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU has AVX-512 (BW), where ISA-L's wider kernels are preferred.
pub fn have_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    use std::arch::x86_64::*;

    /// Rows processed together per pass over the sources.
    pub const MAX_ROWS: usize = 4;

    /// Software prefetch of every source this many bytes ahead. With many sources
    /// streaming from memory at once (e.g. 32+2 with 1 MiB shards) the hardware prefetchers
    /// lose track; measured about 1.2-2x there, no loss in cache (docs/perf.md).
    const PREFETCH_AHEAD: usize = 1024;
    const PREFETCH: bool = true;

    /// Dot product of `R` rows: `dst[r] (=|^=) sum_c T[r][c] * src[c]`, `tables` row-major
    /// with row stride `32 * srcs.len()`. Requires AVX2 (checked by the caller).
    pub fn dot<const R: usize>(
        tables: &[u8],
        srcs: &[&[u8]],
        dsts: &mut [&mut [u8]],
        accumulate: bool,
    ) {
        let k = srcs.len();
        assert!(k >= 1 && dsts.len() == R && tables.len() >= 32 * k * R);
        let len = srcs[0].len();
        assert!(srcs.iter().all(|s| s.len() == len) && dsts.iter().all(|d| d.len() == len));
        let body = len & !31;
        if body > 0 {
            let mut dp = [std::ptr::null_mut::<u8>(); R];
            for (p, d) in dp.iter_mut().zip(dsts.iter_mut()) {
                *p = d.as_mut_ptr();
            }
            // SAFETY: AVX2 is present (the caller checked `have_avx2`); every source and
            // destination holds `len >= body` bytes, the kernel touches [0, body) of each,
            // reads `32*k*R` table bytes; destinations are distinct &mut slices.
            unsafe { dot_body::<R>(tables.as_ptr(), k, srcs, &dp, body, accumulate) };
        }
        if body < len {
            tail_dot(tables, srcs, dsts, body, accumulate);
        }
    }

    fn tail_dot(tables: &[u8], srcs: &[&[u8]], dsts: &mut [&mut [u8]], from: usize, acc: bool) {
        let k = srcs.len();
        for (r, dst) in dsts.iter_mut().enumerate() {
            for (x, d) in dst.iter_mut().enumerate().skip(from) {
                let mut v = if acc { *d } else { 0 };
                for (c, s) in srcs.iter().enumerate() {
                    let t = &tables[(r * k + c) * 32..(r * k + c) * 32 + 32];
                    v ^= t[(s[x] & 15) as usize] ^ t[16 + (s[x] >> 4) as usize];
                }
                *d = v;
            }
        }
    }

    /// # Safety
    /// AVX2 must be present; every source and every `dsts[r]` must hold `body` bytes
    /// (`body` a multiple of 32), the destinations must not overlap the sources or each
    /// other, and `tables` must hold `32 * k * R` bytes.
    #[allow(clippy::needless_range_loop)] // rows index several arrays in lockstep
    #[target_feature(enable = "avx2")]
    unsafe fn dot_body<const R: usize>(
        tables: *const u8,
        k: usize,
        srcs: &[&[u8]],
        dsts: &[*mut u8; R],
        body: usize,
        accumulate: bool,
    ) {
        let mask = _mm256_set1_epi8(0x0f);
        let mut pos = 0;
        // 64 bytes per step: each table pair loaded once serves two vectors.
        while pos + 64 <= body {
            let mut a0 = [_mm256_setzero_si256(); R];
            let mut a1 = [_mm256_setzero_si256(); R];
            if accumulate {
                for r in 0..R {
                    a0[r] = _mm256_loadu_si256(dsts[r].add(pos) as *const __m256i);
                    a1[r] = _mm256_loadu_si256(dsts[r].add(pos + 32) as *const __m256i);
                }
            }
            for (c, s) in srcs.iter().enumerate() {
                let p = s.as_ptr().add(pos);
                if PREFETCH {
                    // Many sources stream from memory at once, more than the hardware
                    // prefetchers follow; a prefetch never faults, even past the end.
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_AHEAD) as *const i8);
                }
                let v0 = _mm256_loadu_si256(p as *const __m256i);
                let v1 = _mm256_loadu_si256(p.add(32) as *const __m256i);
                let lo0 = _mm256_and_si256(v0, mask);
                let hi0 = _mm256_and_si256(_mm256_srli_epi64(v0, 4), mask);
                let lo1 = _mm256_and_si256(v1, mask);
                let hi1 = _mm256_and_si256(_mm256_srli_epi64(v1, 4), mask);
                for r in 0..R {
                    let t = tables.add((r * k + c) * 32);
                    let tlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(t as *const __m128i));
                    let thi =
                        _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(16) as *const __m128i));
                    a0[r] = _mm256_xor_si256(
                        a0[r],
                        _mm256_xor_si256(
                            _mm256_shuffle_epi8(tlo, lo0),
                            _mm256_shuffle_epi8(thi, hi0),
                        ),
                    );
                    a1[r] = _mm256_xor_si256(
                        a1[r],
                        _mm256_xor_si256(
                            _mm256_shuffle_epi8(tlo, lo1),
                            _mm256_shuffle_epi8(thi, hi1),
                        ),
                    );
                }
            }
            for r in 0..R {
                _mm256_storeu_si256(dsts[r].add(pos) as *mut __m256i, a0[r]);
                _mm256_storeu_si256(dsts[r].add(pos + 32) as *mut __m256i, a1[r]);
            }
            pos += 64;
        }
        while pos < body {
            let mut acc = [_mm256_setzero_si256(); R];
            if accumulate {
                for r in 0..R {
                    acc[r] = _mm256_loadu_si256(dsts[r].add(pos) as *const __m256i);
                }
            }
            for (c, s) in srcs.iter().enumerate() {
                let v = _mm256_loadu_si256(s.as_ptr().add(pos) as *const __m256i);
                let lo = _mm256_and_si256(v, mask);
                let hi = _mm256_and_si256(_mm256_srli_epi64(v, 4), mask);
                for r in 0..R {
                    let t = tables.add((r * k + c) * 32);
                    let tlo = _mm256_broadcastsi128_si256(_mm_loadu_si128(t as *const __m128i));
                    let thi =
                        _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(16) as *const __m128i));
                    let p = _mm256_xor_si256(
                        _mm256_shuffle_epi8(tlo, lo),
                        _mm256_shuffle_epi8(thi, hi),
                    );
                    acc[r] = _mm256_xor_si256(acc[r], p);
                }
            }
            for r in 0..R {
                _mm256_storeu_si256(dsts[r].add(pos) as *mut __m256i, acc[r]);
            }
            pos += 32;
        }
    }
}
