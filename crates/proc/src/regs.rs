//! Register state of one thread: the general registers (`struct user_regs_struct`, with
//! fs_base and gs_base) and the FP/SIMD state (the XSAVE area through `NT_X86_XSTATE`, or the
//! 512-byte FXSAVE area through `NT_PRFPREG` where XSAVE is unavailable), and a versioned byte
//! encoding of both to keep in a checkpoint's metadata.

use crate::error::{ProcError, Result};
use crate::sys;

macro_rules! regs {
    ($($name:ident),* $(,)?) => {
        /// x86-64 general registers, in the layout of the kernel's `struct user_regs_struct`.
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub struct Regs { $(pub $name: u64),* }

        impl Regs {
            /// Number of registers.
            pub const COUNT: usize = [$(stringify!($name)),*].len();

            /// The registers in kernel order.
            pub fn to_words(&self) -> [u64; Self::COUNT] {
                [$(self.$name),*]
            }

            /// Registers from words in kernel order.
            pub fn from_words(w: &[u64; Self::COUNT]) -> Regs {
                let mut it = w.iter().copied();
                Regs { $($name: it.next().unwrap_or(0)),* }
            }
        }
    };
}

regs!(
    r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8, rax, rcx, rdx, rsi, rdi, orig_rax, rip, cs,
    eflags, rsp, ss, fs_base, gs_base, ds, es, fs, gs,
);

const _: () = assert!(std::mem::size_of::<Regs>() == std::mem::size_of::<libc::user_regs_struct>());
const _: () = assert!(Regs::COUNT * 8 == std::mem::size_of::<Regs>());

/// Which kernel register set the FP/SIMD bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpKind {
    /// The XSAVE area (`NT_X86_XSTATE`): x87, SSE, AVX, AVX-512, ... as this CPU has them.
    Xstate,
    /// The 512-byte FXSAVE area (`NT_PRFPREG`): x87 and SSE only.
    Fxsave,
}

impl FpKind {
    fn name(self) -> &'static str {
        match self {
            FpKind::Xstate => "xstate",
            FpKind::Fxsave => "fxsave",
        }
    }
}

/// FP/SIMD register state, as the kernel's register set bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FpState {
    /// Which register set.
    pub kind: FpKind,
    /// Its bytes (the legacy FXSAVE layout in the first 512 bytes in both kinds: XMM0..15 at
    /// offset 160).
    pub bytes: Vec<u8>,
}

impl FpState {
    /// Whether both hold the same register values. For XSAVE areas, the header's XSTATE_BV
    /// (bytes 512..520) is left out: it only records which components are in their initial
    /// state, whose values the kernel fills in, and it changes when a thread merely runs (SSE
    /// becomes "in use" after a system call, for example) without any register changing.
    pub fn same_values(&self, other: &FpState) -> bool {
        if self.kind != other.kind || self.bytes.len() != other.bytes.len() {
            return false;
        }
        match self.kind {
            FpKind::Fxsave => self.bytes == other.bytes,
            FpKind::Xstate => {
                let n = self.bytes.len().min(XSTATE_BV_OFFSET);
                self.bytes[..n] == other.bytes[..n]
                    && self.bytes.get(XSTATE_BV_OFFSET + 8..)
                        == other.bytes.get(XSTATE_BV_OFFSET + 8..)
            }
        }
    }
}

/// Offset of XSTATE_BV in the XSAVE header.
pub const XSTATE_BV_OFFSET: usize = 512;

/// Size of the FXSAVE area.
pub const FXSAVE_LEN: usize = 512;
/// Offset of XMM0 in the FXSAVE area.
pub const XMM_OFFSET: usize = 160;

/// Large enough for any XSAVE area the kernel reports (AMX included); the kernel says how much
/// it filled.
const XSTATE_BUF: usize = 64 * 1024;

/// Reads the FP/SIMD state of stopped thread `tid`.
pub fn get_fp(tid: i32) -> Result<FpState> {
    let mut buf = vec![0u8; XSTATE_BUF];
    match sys::get_regset(tid, sys::NT_X86_XSTATE, &mut buf) {
        Ok(n) => {
            buf.truncate(n);
            Ok(FpState {
                kind: FpKind::Xstate,
                bytes: buf,
            })
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENODEV)) => {
            let mut buf = vec![0u8; FXSAVE_LEN];
            let n = sys::get_regset(tid, sys::NT_PRFPREG, &mut buf)
                .map_err(|e| ProcError::ptrace("GETREGSET(NT_PRFPREG)", tid, e))?;
            buf.truncate(n);
            Ok(FpState {
                kind: FpKind::Fxsave,
                bytes: buf,
            })
        }
        Err(e) => Err(ProcError::ptrace("GETREGSET(NT_X86_XSTATE)", tid, e)),
    }
}

/// Writes the FP/SIMD state of stopped thread `tid`.
pub fn set_fp(tid: i32, fp: &FpState) -> Result<()> {
    let (nt, op) = match fp.kind {
        FpKind::Xstate => (sys::NT_X86_XSTATE, "SETREGSET(NT_X86_XSTATE)"),
        FpKind::Fxsave => (sys::NT_PRFPREG, "SETREGSET(NT_PRFPREG)"),
    };
    sys::set_regset(tid, nt, &fp.bytes).map_err(|e| {
        if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::EFAULT) {
            let here = get_fp(tid)
                .map(|f| if f.kind == fp.kind { f.bytes.len() } else { 0 })
                .unwrap_or(0);
            if here != fp.bytes.len() {
                return ProcError::FpMismatch {
                    kind: fp.kind.name(),
                    saved: fp.bytes.len(),
                    here,
                };
            }
        }
        ProcError::ptrace(op, tid, e)
    })
}

/// Reads the general registers of stopped thread `tid`.
pub fn get_regs(tid: i32) -> Result<Regs> {
    sys::get_regs(tid).map_err(|e| ProcError::ptrace("GETREGS", tid, e))
}

/// Writes the general registers of stopped thread `tid`.
pub fn set_regs(tid: i32, r: &Regs) -> Result<()> {
    sys::set_regs(tid, r).map_err(|e| ProcError::ptrace("SETREGS", tid, e))
}

/// Everything a thread's registers hold: what a checkpoint saves per thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadState {
    /// The thread it was taken from (informational; restore may target another thread).
    pub tid: i32,
    /// General registers.
    pub regs: Regs,
    /// FP/SIMD registers.
    pub fp: FpState,
}

const MAGIC: &[u8; 4] = b"KPTS";
const VERSION: u16 = 1;
const FLAG_XSTATE: u16 = 1;

impl ThreadState {
    /// Reads both register sets of stopped thread `tid`.
    pub fn read(tid: i32) -> Result<ThreadState> {
        Ok(ThreadState {
            tid,
            regs: get_regs(tid)?,
            fp: get_fp(tid)?,
        })
    }

    /// Same general registers and same FP/SIMD register values (see
    /// [`FpState::same_values`]).
    pub fn same_values(&self, other: &ThreadState) -> bool {
        self.regs == other.regs && self.fp.same_values(&other.fp)
    }

    /// Writes both register sets into stopped thread `tid`.
    pub fn write(&self, tid: i32) -> Result<()> {
        set_fp(tid, &self.fp)?;
        set_regs(tid, &self.regs)
    }

    /// The versioned encoding: `KPTS`, version (u16), flags (u16), tid (i32), register count
    /// (u32), the registers (u64 each), FP length (u32), FP bytes, CRC-32C of all before it;
    /// little-endian.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + Regs::COUNT * 8 + self.fp.bytes.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let flags = if self.fp.kind == FpKind::Xstate {
            FLAG_XSTATE
        } else {
            0
        };
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.tid.to_le_bytes());
        out.extend_from_slice(&(Regs::COUNT as u32).to_le_bytes());
        for w in self.regs.to_words() {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&(self.fp.bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.fp.bytes);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes `to_bytes` output, checking magic, version, lengths and checksum.
    pub fn from_bytes(b: &[u8]) -> Result<ThreadState> {
        let bad = |detail: &str| ProcError::BadThreadState {
            detail: detail.to_string(),
        };
        if b.len() < 20 + 4 {
            return Err(bad("too short"));
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err(bad("checksum mismatch"));
        }
        if &body[..4] != MAGIC {
            return Err(bad("wrong magic"));
        }
        let u16_at = |o: usize| u16::from_le_bytes([body[o], body[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().expect("4 bytes"));
        let version = u16_at(4);
        if version != VERSION {
            return Err(bad(&format!("version {version}, expected {VERSION}")));
        }
        let flags = u16_at(6);
        let tid = u32_at(8) as i32;
        let count = u32_at(12) as usize;
        if count != Regs::COUNT {
            return Err(bad(&format!("{count} registers, expected {}", Regs::COUNT)));
        }
        let regs_end = 16 + count * 8;
        if body.len() < regs_end + 4 {
            return Err(bad("truncated registers"));
        }
        let mut words = [0u64; Regs::COUNT];
        for (i, w) in words.iter_mut().enumerate() {
            let o = 16 + i * 8;
            *w = u64::from_le_bytes(body[o..o + 8].try_into().expect("8 bytes"));
        }
        let fp_len = u32_at(regs_end) as usize;
        if body.len() != regs_end + 4 + fp_len {
            return Err(bad("FP length does not match"));
        }
        Ok(ThreadState {
            tid,
            regs: Regs::from_words(&words),
            fp: FpState {
                kind: if flags & FLAG_XSTATE != 0 {
                    FpKind::Xstate
                } else {
                    FpKind::Fxsave
                },
                bytes: body[regs_end + 4..].to_vec(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ThreadState {
        let mut w = [0u64; Regs::COUNT];
        for (i, x) in w.iter_mut().enumerate() {
            *x = (i as u64 + 1) * 0x0101_0101_0101;
        }
        ThreadState {
            tid: 1234,
            regs: Regs::from_words(&w),
            fp: FpState {
                kind: FpKind::Xstate,
                bytes: (0..1000u32).map(|i| i as u8).collect(),
            },
        }
    }

    #[test]
    fn round_trip() {
        let s = sample();
        let b = s.to_bytes();
        assert_eq!(ThreadState::from_bytes(&b).unwrap(), s);
        assert_eq!(s.regs.r15, 0x0101_0101_0101);
        assert_eq!(s.regs.gs, 27 * 0x0101_0101_0101);
    }

    #[test]
    fn same_values_ignores_only_xstate_bv() {
        let a = sample();
        let mut b = a.clone();
        b.fp.bytes[XSTATE_BV_OFFSET] ^= 2;
        assert_ne!(a, b);
        assert!(a.same_values(&b));
        b.fp.bytes[XSTATE_BV_OFFSET + 8] ^= 1;
        assert!(!a.same_values(&b));
        let mut c = a.clone();
        c.fp.bytes[XMM_OFFSET] ^= 1;
        assert!(!a.same_values(&c));
        let mut d = a.clone();
        d.regs.rip += 1;
        assert!(!a.same_values(&d));
        let mut e = a.clone();
        e.fp.kind = FpKind::Fxsave;
        assert!(!a.same_values(&e));
    }

    #[test]
    fn damage_is_detected() {
        let b = sample().to_bytes();
        for i in [0, 5, 20, 300, b.len() - 1] {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert!(matches!(
                ThreadState::from_bytes(&d),
                Err(ProcError::BadThreadState { .. })
            ));
        }
        assert!(ThreadState::from_bytes(&b[..b.len() - 1]).is_err());
        assert!(ThreadState::from_bytes(&[]).is_err());
    }
}
