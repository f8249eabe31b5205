//! Engine selection and the region operations every codec call reduces to.

use crate::{gf, portable};
use std::fmt;

/// A Galois-field region engine. [`Engine::best`] picks the fastest one this build and CPU
/// offer; all engines produce identical bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// Intel ISA-L (`libisal`), which dispatches to SSE/AVX/AVX2/AVX-512 itself.
    Isal,
    /// kioku's own AVX2 split-nibble kernels (x86-64 with AVX2).
    Avx2,
    /// Table-driven scalar code; runs on any CPU.
    Scalar,
}

impl Engine {
    /// Every engine this build and CPU can run, fastest first.
    ///
    /// On x86-64 with AVX2 but without AVX-512, kioku's own AVX2 kernels measured faster
    /// than ISA-L's AVX2 code (docs/perf.md) and come first; where AVX-512 is present ISA-L
    /// has wider kernels than kioku and comes first. `KIOKU_EC_ENGINE=isal|avx2|scalar`
    /// moves that engine to the front when it is available.
    pub fn available() -> Vec<Engine> {
        let mut v = Vec::new();
        let isal = cfg!(kioku_isal);
        let avx2 = portable::have_avx2();
        if isal && (portable::have_avx512() || !avx2) {
            v.push(Engine::Isal);
        }
        if avx2 {
            v.push(Engine::Avx2);
        }
        if isal && !v.contains(&Engine::Isal) {
            v.push(Engine::Isal);
        }
        v.push(Engine::Scalar);
        if let Some(e) = std::env::var("KIOKU_EC_ENGINE")
            .ok()
            .and_then(|s| s.parse::<Engine>().ok())
        {
            if let Some(pos) = v.iter().position(|x| *x == e) {
                let e = v.remove(pos);
                v.insert(0, e);
            }
        }
        v
    }

    /// The fastest available engine.
    pub fn best() -> Engine {
        static BEST: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Engine::available()[0])
    }

    /// Whether this engine can run here.
    pub fn is_available(self) -> bool {
        Engine::available().contains(&self)
    }

    /// Short lowercase name (`isal`, `avx2`, `scalar`).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Isal => "isal",
            Engine::Avx2 => "avx2",
            Engine::Scalar => "scalar",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "isal" => Ok(Engine::Isal),
            "avx2" => Ok(Engine::Avx2),
            "scalar" => Ok(Engine::Scalar),
            _ => Err(format!("unknown engine {s:?}; use isal, avx2 or scalar")),
        }
    }
}

/// Bytes of source plus destination data one pass should touch, so that a group of output
/// rows re-reads its sources from cache rather than memory when there are many rows.
const CACHE_BUDGET: usize = 256 * 1024;

/// A coefficient matrix prepared for one engine.
#[derive(Clone)]
pub(crate) struct Plan {
    pub engine: Engine,
    pub rows: usize,
    pub cols: usize,
    pub matrix: Vec<u8>,
    /// ISA-L layout tables, 32 bytes per coefficient (empty for the scalar engine).
    pub tables: Vec<u8>,
    /// The AVX2 engine's tables transposed, column-major (`[col][row]`), so that one
    /// source column updates a group of rows in a single pass.
    pub col_tables: Vec<u8>,
}

impl Plan {
    pub fn new(engine: Engine, rows: usize, cols: usize, matrix: Vec<u8>) -> Plan {
        assert_eq!(matrix.len(), rows * cols);
        let tables = match engine {
            #[cfg(kioku_isal)]
            Engine::Isal => crate::isal::init_tables(cols, rows, &matrix),
            Engine::Scalar => Vec::new(),
            _ => gf::expand_tables(rows, cols, &matrix),
        };
        let mut col_tables = Vec::new();
        if engine == Engine::Avx2 {
            col_tables = vec![0u8; tables.len()];
            for r in 0..rows {
                for c in 0..cols {
                    let from = (r * cols + c) * 32;
                    let to = (c * rows + r) * 32;
                    col_tables[to..to + 32].copy_from_slice(&tables[from..from + 32]);
                }
            }
        }
        Plan {
            engine,
            rows,
            cols,
            matrix,
            tables,
            col_tables,
        }
    }

    /// Segment length for a pass over `len` bytes per row.
    fn segment(&self, len: usize) -> usize {
        if self.rows <= 6 {
            // One pass over the sources computes every row: no re-reading to save.
            return len.min(1 << 30);
        }
        let seg = (CACHE_BUDGET / (self.rows + self.cols)).max(1024) & !63;
        seg.min(len)
    }

    /// `dst[r] = sum_c M[r][c] * src[c]` (`dsts.len() == rows`, `srcs.len() == cols`).
    pub fn dot(&self, srcs: &[&[u8]], dsts: &mut [&mut [u8]]) {
        debug_assert!(srcs.len() == self.cols && dsts.len() == self.rows);
        let len = srcs.first().map_or(0, |s| s.len());
        if len == 0 {
            return;
        }
        let seg = self.segment(len);
        if seg >= len {
            return self.dot_once(srcs, dsts);
        }
        let mut s_seg: Vec<&[u8]> = Vec::with_capacity(srcs.len());
        let mut off = 0;
        while off < len {
            let n = seg.min(len - off);
            s_seg.clear();
            s_seg.extend(srcs.iter().map(|s| &s[off..off + n]));
            let mut d_seg: Vec<&mut [u8]> = dsts.iter_mut().map(|d| &mut d[off..off + n]).collect();
            self.dot_once(&s_seg, &mut d_seg);
            off += n;
        }
    }

    fn dot_once(&self, srcs: &[&[u8]], dsts: &mut [&mut [u8]]) {
        match self.engine {
            #[cfg(kioku_isal)]
            Engine::Isal => crate::isal::encode(&self.tables, srcs, dsts),
            #[cfg(target_arch = "x86_64")]
            Engine::Avx2 => {
                use portable::avx2;
                let stride = 32 * self.cols;
                let mut r0 = 0;
                for group in dsts.chunks_mut(avx2::MAX_ROWS) {
                    let t = &self.tables[r0 * stride..(r0 + group.len()) * stride];
                    match group.len() {
                        4 => avx2::dot::<4>(t, srcs, group, false),
                        3 => avx2::dot::<3>(t, srcs, group, false),
                        2 => avx2::dot::<2>(t, srcs, group, false),
                        _ => avx2::dot::<1>(t, srcs, group, false),
                    }
                    r0 += group.len();
                }
            }
            _ => portable::dot_scalar(&self.matrix, srcs, dsts, false),
        }
    }

    /// `dst[r] ^= M[r][col] * src` for every row.
    pub fn mad(&self, col: usize, src: &[u8], dsts: &mut [&mut [u8]]) {
        debug_assert!(col < self.cols && dsts.len() == self.rows);
        if src.is_empty() {
            return;
        }
        match self.engine {
            #[cfg(kioku_isal)]
            Engine::Isal => {
                let mut off = 0;
                while off < src.len() {
                    let n = crate::isal::MAX_CALL.min(src.len() - off);
                    let mut d_seg: Vec<&mut [u8]> =
                        dsts.iter_mut().map(|d| &mut d[off..off + n]).collect();
                    crate::isal::update(
                        &self.tables,
                        self.cols,
                        col,
                        &src[off..off + n],
                        &mut d_seg,
                    );
                    off += n;
                }
            }
            #[cfg(target_arch = "x86_64")]
            Engine::Avx2 => {
                use portable::avx2;
                let t = &self.col_tables[col * self.rows * 32..(col + 1) * self.rows * 32];
                let s = [src];
                let mut r0 = 0;
                for group in dsts.chunks_mut(avx2::MAX_ROWS) {
                    let g = &t[r0 * 32..(r0 + group.len()) * 32];
                    match group.len() {
                        4 => avx2::dot::<4>(g, &s, group, true),
                        3 => avx2::dot::<3>(g, &s, group, true),
                        2 => avx2::dot::<2>(g, &s, group, true),
                        _ => avx2::dot::<1>(g, &s, group, true),
                    }
                    r0 += group.len();
                }
            }
            _ => {
                let coefs: Vec<u8> = (0..self.rows)
                    .map(|r| self.matrix[r * self.cols + col])
                    .collect();
                portable::mad_scalar(&coefs, src, dsts)
            }
        }
    }
}
