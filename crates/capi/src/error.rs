//! Error codes of the C API, the mapping of the engine's typed errors onto them, and the
//! thread-local "last error" text behind `kioku_last_error`.
//!
//! The values are part of the ABI: `include/kioku.h` defines the same numbers, and
//! `tests/header.rs` compares the two. Codes are only ever appended, never renumbered.

use kioku_ckpt::CkptError;
use kioku_hugepage::HugeError;
use kioku_pool::{MediumError, PoolError};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};

/// Defines each code as a constant and lists them all in `CODES`.
macro_rules! codes {
    ($($name:ident = $value:literal => $text:literal,)*) => {
        $(#[doc = $text] pub const $name: c_int = $value;)*
        /// Every code with its `#define` name and its `kioku_strerror` text (NUL-terminated).
        pub const CODES: &[(c_int, &str, &str)] = &[$(($name, stringify!($name), concat!($text, "\0"))),*];
    };
}

codes! {
    KIOKU_OK = 0 => "success",
    KIOKU_E_INVAL = -1 => "invalid argument",
    KIOKU_E_NOT_FOUND = -2 => "no such pool",
    KIOKU_E_EXISTS = -3 => "file exists",
    KIOKU_E_BUSY = -4 => "pool is in use",
    KIOKU_E_NOT_A_POOL = -5 => "not a kioku pool",
    KIOKU_E_VERSION = -6 => "unsupported pool format version",
    KIOKU_E_TRUNCATED = -7 => "pool file is truncated",
    KIOKU_E_CORRUPT = -8 => "pool is damaged",
    KIOKU_E_ROLLBACK = -9 => "last commit is damaged; recovery needs rollback allowed",
    KIOKU_E_PAGE_SIZE = -10 => "page size mismatch",
    KIOKU_E_KIND = -11 => "pool holds another kind of state",
    KIOKU_E_MEDIUM = -12 => "medium not usable for this path",
    KIOKU_E_ADDRESS_TAKEN = -13 => "region address is taken",
    KIOKU_E_NO_REGION = -14 => "no such region",
    KIOKU_E_REGION_EXISTS = -15 => "region exists",
    KIOKU_E_RESERVATION = -16 => "beyond the region's reservation",
    KIOKU_E_TRACKER = -17 => "page tracking failed",
    KIOKU_E_IO = -18 => "input/output error",
    KIOKU_E_NOMEM = -19 => "out of memory",
    KIOKU_E_RANGE = -20 => "buffer too small",
    KIOKU_E_LIMIT = -21 => "limit reached",
    KIOKU_E_STATE = -22 => "handle unusable after an earlier failure",
    KIOKU_E_INTERNAL = -23 => "internal error",
    KIOKU_E_TIMEOUT = -24 => "timed out",
    KIOKU_E_NO_HUGE_PAGES = -25 => "no huge pages available",
}

/// A failure of a C API call.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    #[error(transparent)]
    Ckpt(#[from] CkptError),
    #[error("{0}")]
    Inval(String),
    #[error("{0}")]
    Range(String),
    #[error("this handle is unusable since an earlier failure ({0}); close it and recover the pool, which holds the last checkpoint")]
    Broken(String),
    #[error("internal error (a bug in kioku, please report it): {0}")]
    Internal(String),
    #[error(transparent)]
    Huge(#[from] HugeError),
    #[error("{0}")]
    Timeout(String),
}

impl CapiError {
    /// The code returned to C.
    pub fn code(&self) -> c_int {
        match self {
            CapiError::Ckpt(e) => ckpt_code(e),
            CapiError::Inval(_) => KIOKU_E_INVAL,
            CapiError::Range(_) => KIOKU_E_RANGE,
            CapiError::Broken(_) => KIOKU_E_STATE,
            CapiError::Internal(_) => KIOKU_E_INTERNAL,
            CapiError::Huge(e) => huge_code(e),
            CapiError::Timeout(_) => KIOKU_E_TIMEOUT,
        }
    }
}

/// The code of a huge-page manager error.
pub fn huge_code(e: &HugeError) -> c_int {
    match e {
        HugeError::Track(_) => KIOKU_E_TRACKER,
        HugeError::BadRange { .. }
        | HugeError::Overlap { .. }
        | HugeError::NotRegistered { .. }
        | HugeError::InvalidSetting(_) => KIOKU_E_INVAL,
        HugeError::NoHugetlbPages { .. } | HugeError::NotHuge { .. } => KIOKU_E_NO_HUGE_PAGES,
        HugeError::ThreadGone(_) => KIOKU_E_STATE,
        HugeError::Sys { source, .. } => io_code(source),
        _ => KIOKU_E_INTERNAL,
    }
}

/// A shorthand for invalid-argument errors.
pub fn inval(msg: impl Into<String>) -> CapiError {
    CapiError::Inval(msg.into())
}

fn io_code(e: &std::io::Error) -> c_int {
    if e.raw_os_error() == Some(libc::ENOMEM) {
        KIOKU_E_NOMEM
    } else {
        KIOKU_E_IO
    }
}

/// The code of an engine error. Exhaustive on purpose: a new error variant anywhere below
/// fails to compile here until it is given a code.
pub fn ckpt_code(e: &CkptError) -> c_int {
    match e {
        CkptError::Pool(p) => pool_code(p),
        CkptError::Medium(m) => medium_code(m),
        CkptError::Track(_) => KIOKU_E_TRACKER,
        CkptError::BadName { .. }
        | CkptError::Misaligned { .. }
        | CkptError::NotInRegion { .. }
        | CkptError::TooLarge { .. } => KIOKU_E_INVAL,
        CkptError::RegionExists { .. } => KIOKU_E_REGION_EXISTS,
        CkptError::NoSuchRegion { .. } => KIOKU_E_NO_REGION,
        CkptError::BeyondReservation { .. } => KIOKU_E_RESERVATION,
        CkptError::AddressTaken { .. } => KIOKU_E_ADDRESS_TAKEN,
        CkptError::Os { source, .. } => io_code(source),
        CkptError::NotACheckpoint { .. }
        | CkptError::MetaDamaged { .. }
        | CkptError::ContextDamaged { .. } => KIOKU_E_CORRUPT,
        CkptError::OutOfOrder { .. } => KIOKU_E_STATE,
    }
}

fn pool_code(e: &PoolError) -> c_int {
    match e {
        PoolError::NotFound { .. } => KIOKU_E_NOT_FOUND,
        PoolError::Exists { .. } => KIOKU_E_EXISTS,
        PoolError::Symlink { .. } => KIOKU_E_INVAL,
        PoolError::Busy { .. } => KIOKU_E_BUSY,
        PoolError::NotAPool { .. } => KIOKU_E_NOT_A_POOL,
        PoolError::UnsupportedVersion { .. } => KIOKU_E_VERSION,
        PoolError::Truncated { .. } => KIOKU_E_TRUNCATED,
        PoolError::HeaderChecksum { .. }
        | PoolError::HeaderInvalid { .. }
        | PoolError::CommitDamaged { .. } => KIOKU_E_CORRUPT,
        PoolError::PageSizeMismatch { .. } => KIOKU_E_PAGE_SIZE,
        PoolError::KindMismatch { .. } => KIOKU_E_KIND,
        PoolError::LiveSlotDamaged { .. } => KIOKU_E_ROLLBACK,
        PoolError::TooManySections { .. } | PoolError::TooManyRoots { .. } => KIOKU_E_LIMIT,
        // Section names are the engine's own: a bad one is a bug, not the caller's doing.
        PoolError::BadName { .. }
        | PoolError::SectionExists { .. }
        | PoolError::NoSuchSection { .. } => KIOKU_E_INTERNAL,
        PoolError::Io { source, .. } => io_code(source),
        PoolError::Medium(m) => medium_code(m),
    }
}

fn medium_code(e: &MediumError) -> c_int {
    match e {
        MediumError::DaxUnsupported { .. }
        | MediumError::NotTmpfs { .. }
        | MediumError::TmpfsNotDurable { .. }
        | MediumError::SimNotOpenable { .. }
        | MediumError::PowerCut { .. }
        | MediumError::TooManyPendingLines { .. }
        | MediumError::NoSuchCrashImage { .. } => KIOKU_E_MEDIUM,
        MediumError::Io { source, .. } => io_code(source),
        MediumError::OutOfRange { .. }
        | MediumError::Shrink { .. }
        | MediumError::Misaligned { .. } => KIOKU_E_INTERNAL,
    }
}

/// Whether a handle can go on after a region operation failed with `e`: true for the errors
/// the engine raises before it changes anything.
pub fn leaves_handle_usable(e: &CkptError) -> bool {
    matches!(
        e,
        CkptError::BadName { .. }
            | CkptError::RegionExists { .. }
            | CkptError::NoSuchRegion { .. }
            | CkptError::BeyondReservation { .. }
            | CkptError::AddressTaken { .. }
            | CkptError::Misaligned { .. }
            | CkptError::TooLarge { .. }
            | CkptError::Os {
                what: "reserve address space",
                ..
            }
            | CkptError::Pool(PoolError::TooManySections { .. })
    )
}

/// The static text of a code, NUL-terminated.
pub fn strerror(code: c_int) -> &'static str {
    CODES
        .iter()
        .find(|c| c.0 == code)
        .map(|c| c.2)
        .unwrap_or("unknown error code\0")
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `msg` as this thread's last error (NULs in it become spaces).
pub fn set_last(msg: &str) {
    let bytes: Vec<u8> = msg
        .bytes()
        .map(|b| if b == 0 || b == b'\n' { b' ' } else { b })
        .collect();
    let c = CString::new(bytes).expect("NUL bytes were replaced");
    LAST.with(|l| *l.borrow_mut() = c);
}

/// This thread's last error text; valid until the next `set_last` on this thread.
pub fn last_ptr() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}
