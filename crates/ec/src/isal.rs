//! The few ISA-L entry points kioku uses (`libisal`, erasure_code.h), behind safe wrappers.
//! ISA-L dispatches to its SSE/AVX/AVX2/AVX-512 code at run time by itself.

use std::os::raw::{c_int, c_uchar};

mod ffi {
    use super::*;
    #[link(name = "isal")]
    extern "C" {
        pub fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
        pub fn ec_encode_data(
            len: c_int,
            k: c_int,
            rows: c_int,
            gftbls: *mut c_uchar,
            data: *mut *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
        pub fn ec_encode_data_update(
            len: c_int,
            k: c_int,
            rows: c_int,
            vec_i: c_int,
            gftbls: *mut c_uchar,
            data: *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
        pub fn gf_gen_cauchy1_matrix(a: *mut c_uchar, m: c_int, k: c_int);
        pub fn gf_invert_matrix(inp: *mut c_uchar, out: *mut c_uchar, n: c_int) -> c_int;
    }
}

/// Largest length passed to ISA-L in one call (its lengths are `int`).
pub const MAX_CALL: usize = 1 << 30;

/// ISA-L's expanded tables for a `rows x k` matrix (`ec_init_tables`).
pub fn init_tables(k: usize, rows: usize, matrix: &[u8]) -> Vec<u8> {
    assert_eq!(matrix.len(), k * rows);
    assert!(k <= 256 && rows <= 256);
    let mut a = matrix.to_vec();
    let mut t = vec![0u8; 32 * k * rows];
    // SAFETY: `a` holds k*rows coefficients and `t` 32*k*rows bytes, the sizes
    // ec_init_tables reads and writes; both live across the call.
    unsafe { ffi::ec_init_tables(k as c_int, rows as c_int, a.as_mut_ptr(), t.as_mut_ptr()) };
    t
}

/// ISA-L's `gf_gen_cauchy1_matrix` for `k` data and `m` parity: the whole `(k+m) x k`
/// matrix, identity on top.
pub fn gen_cauchy1_matrix(k: usize, m: usize) -> Vec<u8> {
    assert!(k >= 1 && k + m <= 256);
    let mut a = vec![0u8; (k + m) * k];
    // SAFETY: the function writes (k+m)*k bytes, the size of `a`.
    unsafe { ffi::gf_gen_cauchy1_matrix(a.as_mut_ptr(), (k + m) as c_int, k as c_int) };
    a
}

/// ISA-L's `gf_invert_matrix`; `None` when singular.
pub fn invert_matrix(a: &[u8], n: usize) -> Option<Vec<u8>> {
    assert_eq!(a.len(), n * n);
    let mut inp = a.to_vec();
    let mut out = vec![0u8; n * n];
    // SAFETY: both buffers hold n*n bytes, as the function requires.
    let rc = unsafe { ffi::gf_invert_matrix(inp.as_mut_ptr(), out.as_mut_ptr(), n as c_int) };
    (rc == 0).then_some(out)
}

/// `dst[r] = sum_c M[r][c] * src[c]` with ISA-L tables for the `dsts.len() x srcs.len()`
/// matrix. All slices have the same length, at most [`MAX_CALL`].
pub fn encode(tables: &[u8], srcs: &[&[u8]], dsts: &mut [&mut [u8]]) {
    let (k, rows) = (srcs.len(), dsts.len());
    assert!((1..=256).contains(&k) && (1..=256).contains(&rows));
    assert_eq!(tables.len(), 32 * k * rows);
    let len = srcs[0].len();
    assert!(len <= MAX_CALL);
    assert!(srcs.iter().all(|s| s.len() == len) && dsts.iter().all(|d| d.len() == len));
    let mut sp = [std::ptr::null_mut::<u8>(); 256];
    let mut dp = [std::ptr::null_mut::<u8>(); 256];
    for (p, s) in sp.iter_mut().zip(srcs) {
        *p = s.as_ptr() as *mut u8;
    }
    for (p, d) in dp.iter_mut().zip(dsts.iter_mut()) {
        *p = d.as_mut_ptr();
    }
    // SAFETY: k source and `rows` destination pointers each address `len` valid bytes
    // (checked above); the destinations are distinct &mut slices, so they neither alias
    // each other nor the shared sources; ISA-L only reads the sources and the tables
    // (32*k*rows bytes).
    unsafe {
        ffi::ec_encode_data(
            len as c_int,
            k as c_int,
            rows as c_int,
            tables.as_ptr() as *mut u8,
            sp.as_mut_ptr(),
            dp.as_mut_ptr(),
        )
    };
}

/// `dst[r] ^= M[r][col] * src` with ISA-L tables for a `dsts.len() x k` matrix.
pub fn update(tables: &[u8], k: usize, col: usize, src: &[u8], dsts: &mut [&mut [u8]]) {
    let rows = dsts.len();
    assert!(col < k && (1..=256).contains(&rows) && k <= 256);
    assert_eq!(tables.len(), 32 * k * rows);
    let len = src.len();
    assert!(len <= MAX_CALL);
    assert!(dsts.iter().all(|d| d.len() == len));
    let mut dp = [std::ptr::null_mut::<u8>(); 256];
    for (p, d) in dp.iter_mut().zip(dsts.iter_mut()) {
        *p = d.as_mut_ptr();
    }
    // SAFETY: `src` and each of the `rows` distinct destinations hold `len` bytes
    // (checked above); ISA-L reads `src` and the 32*k*rows-byte tables, writes only dsts.
    unsafe {
        ffi::ec_encode_data_update(
            len as c_int,
            k as c_int,
            rows as c_int,
            col as c_int,
            tables.as_ptr() as *mut u8,
            src.as_ptr() as *mut u8,
            dp.as_mut_ptr(),
        )
    };
}
