//! The C ABI behind `include/kioku_dsm.h`: one DSM node per process, started from the
//! environment. Every function returns 0 or a negative `KIOKU_DSM_E*` code; the message of
//! the last failure of the calling thread is `kioku_dsm_last_error()`.

use crate::error::DsmError;
use crate::node::{Config, Distribution, Dsm};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::sync::{Arc, RwLock};

pub const KIOKU_DSM_OK: c_int = 0;
pub const KIOKU_DSM_EINVAL: c_int = -1;
pub const KIOKU_DSM_ESTATE: c_int = -2;
pub const KIOKU_DSM_ENODE: c_int = -3;
pub const KIOKU_DSM_EMISMATCH: c_int = -4;
pub const KIOKU_DSM_ENOMEM: c_int = -5;
pub const KIOKU_DSM_EIO: c_int = -6;
pub const KIOKU_DSM_EPROTO: c_int = -7;
pub const KIOKU_DSM_EROLLEDBACK: c_int = -8;
pub const KIOKU_DSM_EDISMISSED: c_int = -9;
pub const KIOKU_DSM_EUNRECOVERABLE: c_int = -10;
pub const KIOKU_DSM_BLOCK: c_int = -1;
pub const KIOKU_DSM_CYCLIC: c_int = -2;

static DSM: RwLock<Option<Arc<Dsm>>> = RwLock::new(None);

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(e: DsmError) -> c_int {
    let code = match &e {
        DsmError::Invalid(_) => KIOKU_DSM_EINVAL,
        DsmError::AlreadyRunning => KIOKU_DSM_ESTATE,
        DsmError::NodeLost { .. } | DsmError::NoAnswer { .. } => KIOKU_DSM_ENODE,
        DsmError::Mismatch(_) => KIOKU_DSM_EMISMATCH,
        DsmError::OutOfSharedMemory { .. } => KIOKU_DSM_ENOMEM,
        DsmError::Protocol { .. } => KIOKU_DSM_EPROTO,
        DsmError::RolledBack { .. } => KIOKU_DSM_EROLLEDBACK,
        DsmError::Dismissed => KIOKU_DSM_EDISMISSED,
        DsmError::Unrecoverable(_) => KIOKU_DSM_EUNRECOVERABLE,
        _ => KIOKU_DSM_EIO,
    };
    say(&e.to_string());
    code
}

fn say(msg: &str) {
    tracing::debug!("kioku_dsm: {msg}");
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

fn with<T>(f: impl FnOnce(&Dsm) -> Result<T, c_int>) -> Result<T, c_int> {
    let d = DSM.read().unwrap().clone();
    match d {
        Some(d) => f(&d),
        None => {
            say("the DSM is not running: call kioku_dsm_init first");
            Err(KIOKU_DSM_ESTATE)
        }
    }
}

fn code(r: Result<(), c_int>) -> c_int {
    r.err().unwrap_or(KIOKU_DSM_OK)
}

/// Starts this process's node from the environment (`KIOKU_DSM_NODE`, `KIOKU_MCAPI_*`).
#[no_mangle]
pub extern "C" fn kioku_dsm_init() -> c_int {
    let mut g = DSM.write().unwrap();
    if g.is_some() {
        say("the DSM is already running in this process");
        return KIOKU_DSM_ESTATE;
    }
    match Config::from_env().and_then(Dsm::init) {
        Ok(d) => {
            *g = Some(Arc::new(d));
            KIOKU_DSM_OK
        }
        Err(e) => fail(e),
    }
}

/// Leaves the job (a last barrier), stops the node and unmaps the shared range.
#[no_mangle]
pub extern "C" fn kioku_dsm_finalize() -> c_int {
    let d = DSM.write().unwrap().take();
    let Some(d) = d else {
        say("the DSM is not running: call kioku_dsm_init first");
        return KIOKU_DSM_ESTATE;
    };
    match Arc::try_unwrap(d) {
        Ok(d) => match d.finalize() {
            Ok(()) => KIOKU_DSM_OK,
            Err(e) => fail(e),
        },
        Err(d) => {
            *DSM.write().unwrap() = Some(d);
            say("another thread is inside a DSM call: finalize after it returns");
            KIOKU_DSM_ESTATE
        }
    }
}

/// This node's id, or a negative code.
#[no_mangle]
pub extern "C" fn kioku_dsm_node() -> c_int {
    with(|d| Ok(d.node() as c_int)).unwrap_or_else(|e| e)
}

/// The number of nodes, or a negative code.
#[no_mangle]
pub extern "C" fn kioku_dsm_nodes() -> c_int {
    with(|d| Ok(d.nodes() as c_int)).unwrap_or_else(|e| e)
}

/// The page size of the shared range (0 when not running).
#[no_mangle]
pub extern "C" fn kioku_dsm_page_size() -> usize {
    with(|d| Ok(d.page_size())).unwrap_or(0)
}

/// Collective allocation; `dist` is `KIOKU_DSM_BLOCK`, `KIOKU_DSM_CYCLIC` or a node id. NULL
/// on failure.
#[no_mangle]
pub extern "C" fn kioku_dsm_alloc(bytes: usize, dist: c_int) -> *mut u8 {
    let dist = match dist {
        KIOKU_DSM_BLOCK => Distribution::Block,
        KIOKU_DSM_CYCLIC => Distribution::Cyclic,
        k if k >= 0 => Distribution::OnNode(k as u32),
        k => {
            say(&format!(
                "distribution {k} is not KIOKU_DSM_BLOCK, KIOKU_DSM_CYCLIC or a node id"
            ));
            return std::ptr::null_mut();
        }
    };
    with(|d| d.alloc(bytes, dist).map_err(fail)).unwrap_or(std::ptr::null_mut())
}

/// Collective allocation with page `i`'s home at `homes[i]` (`count` = the number of pages).
///
/// # Safety
/// `homes` points to `count` readable values.
#[no_mangle]
pub unsafe extern "C" fn kioku_dsm_alloc_homes(
    bytes: usize,
    homes: *const u32,
    count: usize,
) -> *mut u8 {
    if homes.is_null() {
        say("homes is NULL");
        return std::ptr::null_mut();
    }
    // SAFETY: the caller promises `count` readable values.
    let v = unsafe { std::slice::from_raw_parts(homes, count) }.to_vec();
    with(|d| d.alloc(bytes, Distribution::Explicit(v)).map_err(fail))
        .unwrap_or(std::ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn kioku_dsm_barrier() -> c_int {
    code(with(|d| d.barrier().map_err(fail)))
}

#[no_mangle]
pub extern "C" fn kioku_dsm_lock(lock: u32) -> c_int {
    code(with(|d| d.lock(lock).map_err(fail)))
}

#[no_mangle]
pub extern "C" fn kioku_dsm_unlock(lock: u32) -> c_int {
    code(with(|d| d.unlock(lock).map_err(fail)))
}

/// Collective checkpoint: home pages and `len` bytes of private state at `state` go to the
/// buddy's memory. Writes the checkpoint's epoch to `*epoch` if not NULL.
///
/// # Safety
/// `state` points to `len` readable bytes (or is NULL with `len` 0); `epoch` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn kioku_dsm_checkpoint(
    state: *const u8,
    len: usize,
    epoch: *mut u64,
) -> c_int {
    if state.is_null() && len != 0 {
        say("state is NULL but len is not 0");
        return KIOKU_DSM_EINVAL;
    }
    let private: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: the caller promises `len` readable bytes at `state`.
        unsafe { std::slice::from_raw_parts(state, len) }
    };
    match with(|d| d.checkpoint(private).map_err(fail)) {
        Ok(e) => {
            if !epoch.is_null() {
                // SAFETY: the caller promises a writable u64.
                unsafe { epoch.write(e) };
            }
            KIOKU_DSM_OK
        }
        Err(c) => c,
    }
}

/// Collective rollback to the newest checkpoint; its private state is copied to `state`
/// (`cap` bytes there) and its length written to `*len`.
///
/// # Safety
/// `state` points to `cap` writable bytes (or is NULL with `cap` 0); `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kioku_dsm_rollback(state: *mut u8, cap: usize, len: *mut usize) -> c_int {
    if state.is_null() && cap != 0 {
        say("state is NULL but cap is not 0");
        return KIOKU_DSM_EINVAL;
    }
    let r = with(|d| {
        if let Some(need) = d.checkpoint_private_len() {
            if need > cap {
                if !len.is_null() {
                    // SAFETY: the caller promises a writable size_t.
                    unsafe { len.write(need) };
                }
                say(&format!(
                    "the checkpoint's private state has {need} bytes, more than the {cap} given"
                ));
                return Err(KIOKU_DSM_EINVAL);
            }
        }
        d.rollback().map_err(fail)
    });
    match r {
        Ok((_, private)) => {
            if !len.is_null() {
                // SAFETY: the caller promises a writable size_t.
                unsafe { len.write(private.len()) };
            }
            // SAFETY: checked above: `private.len() <= cap` writable bytes at `state` (the
            // newest image cannot change between the check and the rollback: both run on the
            // caller's thread and checkpoints are collective calls of that thread).
            unsafe {
                std::ptr::copy_nonoverlapping(private.as_ptr(), state, private.len().min(cap))
            };
            KIOKU_DSM_OK
        }
        Err(c) => c,
    }
}

/// After `KIOKU_DSM_EROLLEDBACK` (or `kioku_dsm_init` of a standby that took over a lost
/// node): copies this node's private state of the checkpoint the job went back to into
/// `state` (`cap` bytes), its length to `*len`, and returns 1; 0 when there is none. When it
/// does not fit: `KIOKU_DSM_EINVAL`, the length needed in `*len`, and the state is kept.
///
/// # Safety
/// `state` points to `cap` writable bytes (or is NULL with `cap` 0); `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kioku_dsm_resume(state: *mut u8, cap: usize, len: *mut usize) -> c_int {
    if state.is_null() && cap != 0 {
        say("state is NULL but cap is not 0");
        return KIOKU_DSM_EINVAL;
    }
    let r = with(|d| {
        let Some(need) = d.resume_len() else {
            return Ok(None);
        };
        if !len.is_null() {
            // SAFETY: the caller promises a writable size_t.
            unsafe { len.write(need) };
        }
        if need > cap {
            say(&format!(
                "the private state to resume from has {need} bytes, more than the {cap} given"
            ));
            return Err(KIOKU_DSM_EINVAL);
        }
        Ok(d.take_resume())
    });
    match r {
        Ok(Some((_, private))) => {
            // SAFETY: `private.len() <= cap` writable bytes at `state` (checked above; only the
            // caller's thread takes the state).
            unsafe {
                std::ptr::copy_nonoverlapping(private.as_ptr(), state, private.len().min(cap))
            };
            1
        }
        Ok(None) => 0,
        Err(c) => c,
    }
}

/// The private state of the checkpoints taken every `KIOKU_DSM_CHECKPOINT_EVERY` barriers.
///
/// # Safety
/// `state` points to `len` readable bytes (or is NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn kioku_dsm_set_private(state: *const u8, len: usize) -> c_int {
    if state.is_null() && len != 0 {
        say("state is NULL but len is not 0");
        return KIOKU_DSM_EINVAL;
    }
    let private: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: the caller promises `len` readable bytes at `state`.
        unsafe { std::slice::from_raw_parts(state, len) }
    };
    code(with(|d| d.set_private(private).map_err(fail)))
}

/// The message of the calling thread's last failure ("" if none); valid until its next call.
#[no_mangle]
pub extern "C" fn kioku_dsm_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}
