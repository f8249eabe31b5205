//! Error codes of the C API, the mapping of the engine's typed errors onto them, and the
//! thread-local "last error" text behind `kioku_last_error`.
//!
//! The values are part of the ABI: `include/kioku.h` defines the same numbers, and the test
//! `header_matches` compares the two. Codes are only ever appended.

use kioku_ckpt::CkptError;
use kioku_pool::{MediumError, PoolError};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};

pub const KIOKU_OK: c_int = 0;
pub const KIOKU_E_INVAL: c_int = -1;
pub const KIOKU_E_NOT_FOUND: c_int = -2;
pub const KIOKU_E_EXISTS: c_int = -3;
pub const KIOKU_E_BUSY: c_int = -4;
pub const KIOKU_E_NOT_A_POOL: c_int = -5;
pub const KIOKU_E_VERSION: c_int = -6;
pub const KIOKU_E_TRUNCATED: c_int = -7;
pub const KIOKU_E_CORRUPT: c_int = -8;
pub const KIOKU_E_ROLLBACK: c_int = -9;
pub const KIOKU_E_PAGE_SIZE: c_int = -10;
pub const KIOKU_E_KIND: c_int = -11;
pub const KIOKU_E_MEDIUM: c_int = -12;
pub const KIOKU_E_ADDRESS_TAKEN: c_int = -13;
pub const KIOKU_E_NO_REGION: c_int = -14;
pub const KIOKU_E_REGION_EXISTS: c_int = -15;
pub const KIOKU_E_RESERVATION: c_int = -16;
pub const KIOKU_E_TRACKER: c_int = -17;
pub const KIOKU_E_IO: c_int = -18;
pub const KIOKU_E_NOMEM: c_int = -19;
pub const KIOKU_E_RANGE: c_int = -20;
pub const KIOKU_E_LIMIT: c_int = -21;
pub const KIOKU_E_STATE: c_int = -22;
pub const KIOKU_E_INTERNAL: c_int = -23;

/// Every code with its `#define` name and its `kioku_strerror` text (NUL-terminated).
pub const CODES: &[(c_int, &str, &str)] = &[
    (KIOKU_OK, "KIOKU_OK", "success\0"),
    (KIOKU_E_INVAL, "KIOKU_E_INVAL", "invalid argument\0"),
    (KIOKU_E_NOT_FOUND, "KIOKU_E_NOT_FOUND", "no such pool\0"),
    (KIOKU_E_EXISTS, "KIOKU_E_EXISTS", "file exists\0"),
    (KIOKU_E_BUSY, "KIOKU_E_BUSY", "pool is in use\0"),
    (KIOKU_E_NOT_A_POOL, "KIOKU_E_NOT_A_POOL", "not a kioku pool\0"),
    (
        KIOKU_E_VERSION,
        "KIOKU_E_VERSION",
        "unsupported pool format version\0",
    ),
    (KIOKU_E_TRUNCATED, "KIOKU_E_TRUNCATED", "pool file is truncated\0"),
    (KIOKU_E_CORRUPT, "KIOKU_E_CORRUPT", "pool is damaged\0"),
    (
        KIOKU_E_ROLLBACK,
        "KIOKU_E_ROLLBACK",
        "last commit is damaged; recovery needs rollback allowed\0",
    ),
    (KIOKU_E_PAGE_SIZE, "KIOKU_E_PAGE_SIZE", "page size mismatch\0"),
    (
        KIOKU_E_KIND,
        "KIOKU_E_KIND",
        "pool holds another kind of state\0",
    ),
    (
        KIOKU_E_MEDIUM,
        "KIOKU_E_MEDIUM",
        "medium not usable for this path\0",
    ),
    (
        KIOKU_E_ADDRESS_TAKEN,
        "KIOKU_E_ADDRESS_TAKEN",
        "region address is taken\0",
    ),
    (KIOKU_E_NO_REGION, "KIOKU_E_NO_REGION", "no such region\0"),
    (
        KIOKU_E_REGION_EXISTS,
        "KIOKU_E_REGION_EXISTS",
        "region exists\0",
    ),
    (
        KIOKU_E_RESERVATION,
        "KIOKU_E_RESERVATION",
        "beyond the region's reservation\0",
    ),
    (
        KIOKU_E_TRACKER,
        "KIOKU_E_TRACKER",
        "page tracking failed\0",
    ),
    (KIOKU_E_IO, "KIOKU_E_IO", "input/output error\0"),
    (KIOKU_E_NOMEM, "KIOKU_E_NOMEM", "out of memory\0"),
    (KIOKU_E_RANGE, "KIOKU_E_RANGE", "buffer too small\0"),
    (KIOKU_E_LIMIT, "KIOKU_E_LIMIT", "limit reached\0"),
    (
        KIOKU_E_STATE,
        "KIOKU_E_STATE",
        "handle unusable after an earlier failure\0",
    ),
    (KIOKU_E_INTERNAL, "KIOKU_E_INTERNAL", "internal error\0"),
];

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
        }
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
        CkptError::BadName { .. } | CkptError::Misaligned { .. } => KIOKU_E_INVAL,
        CkptError::RegionExists { .. } => KIOKU_E_REGION_EXISTS,
        CkptError::NoSuchRegion { .. } => KIOKU_E_NO_REGION,
        CkptError::BeyondReservation { .. } => KIOKU_E_RESERVATION,
        CkptError::AddressTaken { .. } => KIOKU_E_ADDRESS_TAKEN,
        CkptError::Os { source, .. } => io_code(source),
        CkptError::NotACheckpoint { .. }
        | CkptError::MetaDamaged { .. }
        | CkptError::ContextDamaged { .. } => KIOKU_E_CORRUPT,
    }
}

fn pool_code(e: &PoolError) -> c_int {
    match e {
        PoolError::NotFound { .. } => KIOKU_E_NOT_FOUND,
        PoolError::Exists { .. } => KIOKU_E_EXISTS,
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
