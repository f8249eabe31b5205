//! The C API of `include/kioku_group.h`. One group per process (as one MPI job per process):
//! `kioku_group_init` (in the C shim, which duplicates the communicator) calls
//! [`kioku_group_start`]; every other function acts on that group. No panic crosses into C;
//! failures return a negative code and leave a one-line text for `kioku_group_error`.

use crate::config::Config;
use crate::error::GroupError;
use crate::group::Group;
use crate::mpi::Comm;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

pub const KIOKU_OK: c_int = 0;
pub const KIOKU_E_INVAL: c_int = -1;
pub const KIOKU_E_NOT_FOUND: c_int = -2;
pub const KIOKU_E_BUSY: c_int = -4;
pub const KIOKU_E_CORRUPT: c_int = -8;
pub const KIOKU_E_IO: c_int = -18;
pub const KIOKU_E_NOMEM: c_int = -19;
pub const KIOKU_E_STATE: c_int = -22;
pub const KIOKU_E_INTERNAL: c_int = -23;
/// An MPI operation failed.
pub const KIOKU_E_MPI: c_int = -30;
/// Lost ranks cannot be rebuilt (more than m in a group, or no remote level was ever taken).
pub const KIOKU_E_LOST: c_int = -31;
/// Another rank failed; the message names it.
pub const KIOKU_E_REMOTE: c_int = -32;
/// The configuration (file or KIOKU_* variables) is wrong or differs from the pools'.
pub const KIOKU_E_CONFIG: c_int = -33;

/// The process's group, behind a lock.
struct Slot(Option<Group>);

// SAFETY: the group is only touched under `GROUP`'s lock, one thread at a time; what it owns
// (a pool mapping, a userfaultfd or the mprotect tracker's process-wide state, MPI through a
// communicator of the process) is not tied to the thread that created it.
unsafe impl Send for Slot {}

static GROUP: Mutex<Slot> = Mutex::new(Slot(None));

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// The code of `e` as rank `rank` reports it: the rank whose page cannot be rebuilt says
/// `KIOKU_E_CORRUPT`, the others `KIOKU_E_LOST`.
fn code_of(e: &GroupError, rank: usize) -> c_int {
    use kioku_ckpt::CkptError as C;
    use kioku_pool::PoolError as P;
    match e {
        GroupError::Mpi { .. } => KIOKU_E_MPI,
        GroupError::Config(_) | GroupError::SizeChanged { .. } => KIOKU_E_CONFIG,
        GroupError::State(_) => KIOKU_E_STATE,
        GroupError::Invalid(_) => KIOKU_E_INVAL,
        GroupError::Remote { .. } => KIOKU_E_REMOTE,
        GroupError::TooManyLost { .. } | GroupError::NoRedundancy { .. } => KIOKU_E_LOST,
        GroupError::Unrecoverable { pages, .. } if pages.iter().any(|p| p.0 == rank) => {
            KIOKU_E_CORRUPT
        }
        GroupError::Unrecoverable { .. } => KIOKU_E_LOST,
        GroupError::FlightFailed { why, .. } if why.contains("checksum") => KIOKU_E_CORRUPT,
        GroupError::FlightFailed { .. } => KIOKU_E_REMOTE,
        GroupError::Pool { .. } => KIOKU_E_IO,
        GroupError::Ec(_) => KIOKU_E_INTERNAL,
        GroupError::Ckpt(c) => match c {
            C::Pool(P::Busy { .. }) => KIOKU_E_BUSY,
            C::Pool(P::NotFound { .. }) => KIOKU_E_NOT_FOUND,
            C::MetaDamaged { .. } | C::ContextDamaged { .. } | C::NotACheckpoint { .. } => {
                KIOKU_E_CORRUPT
            }
            C::BeyondReservation { .. } | C::TooLarge { .. } => KIOKU_E_NOMEM,
            _ => KIOKU_E_IO,
        },
    }
}

/// Runs `f` on the group, turning errors and panics into codes.
fn with_group(what: &str, f: impl FnOnce(&mut Group) -> Result<c_int, GroupError>) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut guard = GROUP.lock().unwrap_or_else(|p| p.into_inner());
        match guard.0.as_mut() {
            None => Err((
                KIOKU_E_STATE,
                format!("{what}: call kioku_group_init first"),
            )),
            Some(g) => {
                let rank = g.rank();
                f(g).map_err(|e| (code_of(&e, rank), format!("{what}: {e}")))
            }
        }
    }));
    match r {
        Ok(Ok(c)) => c,
        Ok(Err((code, msg))) => {
            tracing::debug!(code, %msg, "kioku group call failed");
            set_error(&msg);
            code
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            set_error(&format!("{what}: internal error (a bug in kioku): {msg}"));
            KIOKU_E_INTERNAL
        }
    }
}

fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Some(filter) = std::env::var_os("KIOKU_LOG").filter(|v| !v.is_empty()) {
            let filter = tracing_subscriber::EnvFilter::new(filter.to_string_lossy());
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .try_init();
        }
    });
}

/// `MPI_Comm` as the MPI implementation the library was built with defines it.
#[cfg(not(mpi_comm_is_int))]
pub type MpiComm = *mut c_void;
#[cfg(mpi_comm_is_int)]
pub type MpiComm = c_int;

extern "C" {
    fn kioku_shim_init(comm: MpiComm, config: *const c_char) -> c_int;
    fn kioku_shim_init_f(comm: c_int, config: *const c_char) -> c_int;
    fn kioku_shim_finalize() -> c_int;
}

/// `kioku_group_init` of the header: the shim duplicates `comm`, then calls
/// [`kioku_group_start`].
///
/// # Safety
/// `comm` is a valid communicator; `config` NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn kioku_group_init(comm: MpiComm, config: *const c_char) -> c_int {
    // SAFETY: arguments passed through as the header defines them.
    unsafe { kioku_shim_init(comm, config) }
}

/// `kioku_group_init_f`: a Fortran communicator handle.
///
/// # Safety
/// As [`kioku_group_init`].
#[no_mangle]
pub unsafe extern "C" fn kioku_group_init_f(comm: c_int, config: *const c_char) -> c_int {
    // SAFETY: arguments passed through as the header defines them.
    unsafe { kioku_shim_init_f(comm, config) }
}

/// `kioku_group_finalize`: closes the pools, frees the duplicate communicator.
#[no_mangle]
pub extern "C" fn kioku_group_finalize() -> c_int {
    // SAFETY: no arguments; the shim checks its own state.
    unsafe { kioku_shim_finalize() }
}

/// Called by `kioku_group_init` (C shim) once the communicator is duplicated.
///
/// # Safety
/// `config` is NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn kioku_group_start(config: *const c_char) -> c_int {
    init_logging();
    let path = if config.is_null() {
        None
    } else {
        // SAFETY: non-NULL and NUL-terminated per the header.
        let s = unsafe { CStr::from_ptr(config) };
        Some(std::path::PathBuf::from(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(s.to_bytes()),
        ))
    };
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<(), (c_int, String)> {
        let mut guard = GROUP.lock().unwrap_or_else(|p| p.into_inner());
        if guard.0.is_some() {
            return Err((
                KIOKU_E_STATE,
                "kioku_group_init: already initialised".into(),
            ));
        }
        let fail = |e: GroupError| (code_of(&e, usize::MAX), format!("kioku_group_init: {e}"));
        let cfg = Config::load(path.as_deref(), &|k| std::env::var(k).ok()).map_err(fail)?;
        let comm = Comm::attach().map_err(fail)?;
        guard.0 = Some(Group::start(comm, cfg).map_err(fail)?);
        Ok(())
    }));
    match r {
        Ok(Ok(())) => KIOKU_OK,
        Ok(Err((code, msg))) => {
            set_error(&msg);
            code
        }
        Err(_) => {
            set_error("kioku_group_init: internal error (a bug in kioku)");
            KIOKU_E_INTERNAL
        }
    }
}

/// Called by `kioku_group_finalize` (C shim) before the communicator is freed.
#[no_mangle]
pub extern "C" fn kioku_group_stop() -> c_int {
    let r = catch_unwind(|| {
        let mut guard = GROUP.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.take().map(|mut g| {
            let rank = g.rank();
            g.close().map_err(|e| (code_of(&e, rank), e.to_string()))
        })
    });
    match r {
        Ok(Some(Ok(()))) => KIOKU_OK,
        Ok(Some(Err((code, msg)))) => {
            set_error(&format!("kioku_group_finalize: {msg}"));
            code
        }
        Ok(None) => {
            set_error("kioku_group_finalize: not initialised");
            KIOKU_E_STATE
        }
        Err(_) => KIOKU_E_INTERNAL,
    }
}

/// Memory for protected region `id`: `size` bytes, zeroed when new; after `kioku_group_recover`,
/// the recovered contents. NULL on failure (see `kioku_group_error`).
#[no_mangle]
pub extern "C" fn kioku_group_alloc(id: u32, size: usize) -> *mut c_void {
    let mut out: *mut c_void = std::ptr::null_mut();
    let rc = with_group("kioku_group_alloc", |g| {
        out = g.alloc(id, size)?.cast();
        Ok(KIOKU_OK)
    });
    if rc == KIOKU_OK {
        out
    } else {
        std::ptr::null_mut()
    }
}

/// Protects the program's own buffer `ptr` of `size` bytes as region `id` (see
/// `Group::protect`).
///
/// # Safety
/// `ptr` valid for reads and writes of `size` bytes until protected anew or finalised.
#[no_mangle]
pub unsafe extern "C" fn kioku_group_protect(id: u32, ptr: *mut c_void, size: usize) -> c_int {
    with_group("kioku_group_protect", |g| {
        // SAFETY: the caller's contract, passed through.
        unsafe { g.protect(id, ptr.cast(), size)? };
        Ok(KIOKU_OK)
    })
}

/// Collective checkpoint at `level` (KIOKU_LEVEL_LOCAL, _PARTNER, _RS).
#[no_mangle]
pub extern "C" fn kioku_group_checkpoint(level: c_int) -> c_int {
    with_group("kioku_group_checkpoint", |g| {
        let l = u8::try_from(level)
            .map_err(|_| GroupError::Invalid(format!("checkpoint level {level}: 1, 2 or 3")))?;
        g.checkpoint(l)?;
        Ok(KIOKU_OK)
    })
}

/// Collective recovery after a restart.
#[no_mangle]
pub extern "C" fn kioku_group_recover() -> c_int {
    with_group("kioku_group_recover", |g| {
        g.recover()?;
        Ok(KIOKU_OK)
    })
}

/// Collective scrub (see `Group::verify`): `*bad_pages` gets the number of pages, over the
/// job, still damaged after it (not rebuilt) plus parity pages that differ from a fresh
/// encoding; the status's `healed_pages` says how many it rebuilt.
///
/// # Safety
/// `bad_pages` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kioku_group_verify(bad_pages: *mut u64) -> c_int {
    with_group("kioku_group_verify", |g| {
        let r = g.verify()?;
        let bad =
            r.damaged.saturating_sub(r.healed) + r.mismatched.iter().map(|(_, b)| b).sum::<u64>();
        if !bad_pages.is_null() {
            // SAFETY: non-NULL and writable per the header.
            unsafe { bad_pages.write(bad) };
        }
        Ok(KIOKU_OK)
    })
}

/// Waits for this rank's background encoding, if one runs (not collective): `KIOKU_OK` once
/// the level is committed or, if the encoding failed somewhere, the level kept its previous
/// parity (`kioku_group_status` says which).
#[no_mangle]
pub extern "C" fn kioku_group_wait() -> c_int {
    with_group("kioku_group_wait", |g| {
        g.wait()?;
        Ok(KIOKU_OK)
    })
}

/// `struct kioku_group_status` of kioku_group.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GroupStatus {
    pub rank: i32,
    pub size: i32,
    pub group: i32,
    pub group_size: i32,
    pub position: i32,
    pub rs_k: i32,
    pub rs_m: i32,
    pub must_recover: i32,
    pub epoch: u64,
    pub last_level: i32,
    pub recovered_level: i32,
    pub recovered_epoch: u64,
    pub recovered_lost: u64,
    pub recovered_ns: u64,
    pub recovered_decode_ns: u64,
    pub recovered_bytes: u64,
    pub last_dirty_pages: u64,
    pub last_encoded_pages: u64,
    pub last_bytes_sent: u64,
    pub last_encode_ns: u64,
    pub last_persist_ns: u64,
    pub last_total_ns: u64,
    pub background: i32,
    pub in_flight: i32,
    pub partner_epoch: u64,
    pub rs_epoch: u64,
    pub last_waited_ns: u64,
    pub last_journaled_pages: u64,
    pub flight_level: i32,
    pub flight_committed: i32,
    pub flight_epoch: u64,
    pub flight_durable_ns: u64,
    pub flight_bytes_sent: u64,
    pub flight_encoded_pages: u64,
    pub healed_pages: u64,
    pub pool_bytes: u64,
    pub flight_pool_peak_bytes: u64,
}

/// Bytes of the status as `KIOKU_GROUP_VERSION` 1 defined it (the fields before `background`):
/// all that `kioku_group_status` writes, so that programs built against that header, and
/// bindings that declare its struct, are never overrun.
const STATUS_V1_LEN: usize = std::mem::offset_of!(GroupStatus, background);

/// Fills the first `STATUS_V1_LEN` bytes of `*out` with this rank's view (the header's macro
/// of the same name calls [`kioku_group_status_size`] instead).
///
/// # Safety
/// `out` is a writable `struct kioku_group_status` of version 1 or later.
#[no_mangle]
pub unsafe extern "C" fn kioku_group_status(out: *mut GroupStatus) -> c_int {
    // SAFETY: the caller's promise, passed on with the version-1 size.
    unsafe { status_into(out, STATUS_V1_LEN, "kioku_group_status") }
}

/// Fills the first `size` bytes of `*out` (at most the whole status of this version).
///
/// # Safety
/// `out` points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn kioku_group_status_size(out: *mut GroupStatus, size: usize) -> c_int {
    let len = size.min(std::mem::size_of::<GroupStatus>());
    // SAFETY: the caller's promise; `len` is no more than `size`.
    unsafe { status_into(out, len, "kioku_group_status_size") }
}

/// # Safety
/// `out` points to `len` writable bytes, `len` ≤ the size of [`GroupStatus`].
unsafe fn status_into(out: *mut GroupStatus, len: usize, what: &str) -> c_int {
    if out.is_null() {
        set_error(&format!("{what}: out is NULL"));
        return KIOKU_E_INVAL;
    }
    with_group(what, |g| {
        let (gi, pos, glen) = g.group();
        let (k, m) = g.rs_code().unwrap_or((0, 0));
        let rec = g.recovered.clone().unwrap_or_default();
        let fl = g.last_flight.clone().unwrap_or_default();
        let healed = g.scrubbed.as_ref().map_or(rec.healed_pages, |s| s.healed);
        let s = GroupStatus {
            rank: g.rank() as i32,
            size: g.size() as i32,
            group: gi as i32,
            group_size: glen as i32,
            position: pos as i32,
            rs_k: k as i32,
            rs_m: m as i32,
            must_recover: g.must_recover() as i32,
            epoch: g.epoch(),
            last_level: g.last_level() as i32,
            recovered_level: rec.level as i32,
            recovered_epoch: rec.epoch,
            recovered_lost: rec.lost.len() as u64,
            recovered_ns: rec.total.as_nanos() as u64,
            recovered_decode_ns: rec.decode.as_nanos() as u64,
            recovered_bytes: rec.bytes_received,
            last_dirty_pages: g.last.dirty_pages,
            last_encoded_pages: g.last.encoded_pages,
            last_bytes_sent: g.last.bytes_sent,
            last_encode_ns: g.last.encode.as_nanos() as u64,
            last_persist_ns: g.last.persist.as_nanos() as u64,
            last_total_ns: g.last.total.as_nanos() as u64,
            background: g.background() as i32,
            in_flight: g.in_flight() as i32,
            partner_epoch: g.level_epoch(crate::PARTNER),
            rs_epoch: g.level_epoch(crate::RS),
            last_waited_ns: g.last.waited.as_nanos() as u64,
            last_journaled_pages: g.last.journaled_pages,
            flight_level: fl.level as i32,
            flight_committed: fl.committed as i32,
            flight_epoch: fl.epoch,
            flight_durable_ns: fl.durable.as_nanos() as u64,
            flight_bytes_sent: fl.bytes_sent,
            flight_encoded_pages: fl.encoded_pages,
            healed_pages: healed,
            pool_bytes: g.pool_bytes(),
            flight_pool_peak_bytes: fl.pool_peak,
        };
        // SAFETY: `out` is non-NULL with `len` writable bytes (the caller's promise), `len` is
        // at most the size of `s`, and a local cannot overlap the caller's buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&s as *const GroupStatus).cast::<u8>(),
                out.cast::<u8>(),
                len,
            )
        };
        Ok(KIOKU_OK)
    })
}

/// The last failure of this thread, one line ("" when none).
#[no_mangle]
pub extern "C" fn kioku_group_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
