//! kioku's C API: the checkpoint engine (`kioku-ckpt`) behind the hand-written header
//! `include/kioku.h`, built as `libkioku.so` and `libkioku.a`.
//!
//! The header is the contract; this crate implements it. Rules kept by every function here:
//! no panic crosses into C (each body runs under `catch_unwind`, a panic becomes
//! `KIOKU_E_INTERNAL`); every pointer is checked for NULL before use; out-parameters are
//! written only on success; a failure records a one-line text for `kioku_last_error`.
//!
//! Logging goes through `tracing`, so it is silent unless a subscriber exists. A C program
//! has none: setting the environment variable `KIOKU_LOG` (a `tracing` filter such as `info`
//! or `kioku_ckpt=debug`) makes the first `kioku_create`/`kioku_recover*` call install one
//! that writes to stderr, unless the process already has a subscriber.

pub mod error;
mod hot;

pub use error::*;
pub use hot::{HotHandle, HotNotice, HotPage, HotPolicy, HotReport, HotStatus};

use kioku_ckpt::{CkptError, Engine, EngineOptions, RegionOptions};
use kioku_pool::{MediumChoice, MediumKind};
use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// `KIOKU_API_VERSION` of the header this library implements.
pub const KIOKU_API_VERSION: u32 = 1;
/// Longest region name in bytes.
pub const KIOKU_REGION_NAME_MAX: usize = 63;
/// `kioku_recover_ex` flag: accept the previous commit when the live one is damaged.
pub const KIOKU_RECOVER_ALLOW_ROLLBACK: u32 = 1;

/// What C holds as `kioku_engine *`.
pub struct EngineHandle {
    engine: Engine,
    /// Metadata of the last checkpoint taken or recovered.
    metadata: Vec<u8>,
    /// Why the handle refuses work, once an operation failed half-way.
    broken: Option<String>,
}

/// `struct kioku_checkpoint_stats` of kioku.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    pub epoch: u64,
    pub dirty_pages: u64,
    pub dirty_bytes: u64,
    pub scan_ns: u64,
    pub persist_ns: u64,
    pub sync_ns: u64,
    pub total_ns: u64,
}

/// `struct kioku_recovery` of kioku.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    pub epoch: u64,
    pub time_ns: u64,
    pub meta_len: u64,
    pub pages_synced: u64,
    pub source_ctx: u32,
    pub used_copy: u32,
}

/// Runs `f`, turning an error or a panic into its code and the thread's last-error text.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), CapiError>) -> c_int {
    let err = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return KIOKU_OK,
        Ok(Err(e)) => e,
        Err(panic) => CapiError::Internal(panic_text(&panic)),
    };
    set_last(&err.to_string());
    err.code()
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// Runs `f` on the handle behind `e`: refuses a broken handle; marks it broken when `f`
/// panics or fails with an error for which `usable` says no.
///
/// # Safety
/// `e` is NULL or a live handle from `kioku_create`/`kioku_recover*` that no other thread
/// uses during the call.
unsafe fn with_engine(
    e: *mut EngineHandle,
    what: &str,
    usable: impl Fn(&CkptError) -> bool,
    f: impl FnOnce(&mut EngineHandle) -> Result<(), CapiError>,
) -> c_int {
    if e.is_null() {
        return guard(|| Err(inval(format!("{what}: engine handle is NULL"))));
    }
    let mut panicked = true;
    let code = guard(|| {
        // SAFETY: non-NULL, and by the caller's contract a live handle used by this thread
        // alone for the duration of the call.
        let h = unsafe { &mut *e };
        if let Some(why) = &h.broken {
            panicked = false;
            return Err(CapiError::Broken(why.clone()));
        }
        let r = f(h);
        panicked = false;
        if let Err(CapiError::Ckpt(err)) = &r {
            if !usable(err) {
                h.broken = Some(format!("{what}: {err}"));
            }
        }
        r
    });
    if panicked {
        // SAFETY: as above; the closure that borrowed the handle has ended.
        let h = unsafe { &mut *e };
        h.broken = Some(format!("{what}: internal error"));
    }
    code
}

/// Shared view of the handle for read-only calls (`None` for NULL).
///
/// # Safety
/// As `with_engine`.
unsafe fn handle_ref<'a>(e: *const EngineHandle) -> Option<&'a EngineHandle> {
    // SAFETY: NULL or a live handle not being changed by another thread (caller's contract).
    unsafe { e.as_ref() }
}

/// A required C string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a CStr, CapiError> {
    if p.is_null() {
        return Err(inval(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    Ok(unsafe { CStr::from_ptr(p) })
}

/// # Safety
/// As `c_str`.
unsafe fn path_arg<'a>(p: *const c_char) -> Result<&'a Path, CapiError> {
    // SAFETY: forwarded contract.
    let s = unsafe { c_str(p, "path") }?;
    if s.is_empty() {
        return Err(inval("path is empty"));
    }
    Ok(Path::new(OsStr::from_bytes(s.to_bytes())))
}

/// # Safety
/// As `c_str`.
unsafe fn name_arg<'a>(p: *const c_char) -> Result<&'a str, CapiError> {
    // SAFETY: forwarded contract.
    let s = unsafe { c_str(p, "region name") }?;
    s.to_str()
        .map_err(|_| inval(format!("region name {s:?} is not UTF-8")))
}

/// # Safety
/// As `c_str` (NULL allowed: "auto").
unsafe fn medium_arg(p: *const c_char) -> Result<MediumChoice, CapiError> {
    if p.is_null() {
        return Ok(MediumChoice::Auto);
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    match s.to_bytes() {
        b"auto" => Ok(MediumChoice::Auto),
        b"dax" => Ok(MediumChoice::Exactly(MediumKind::Dax)),
        b"file" => Ok(MediumChoice::Exactly(MediumKind::File)),
        b"shm" => Ok(MediumChoice::Exactly(MediumKind::Shm)),
        _ => Err(inval(format!(
            "unknown medium {s:?}; choose NULL, \"auto\", \"dax\", \"file\" or \"shm\""
        ))),
    }
}

/// Lengths past this are refused up front: no address space holds them, and the engine's
/// page rounding must not overflow.
const MAX_LEN: usize = 1 << 56;

pub(crate) fn len_arg(what: &str, len: usize) -> Result<usize, CapiError> {
    if len > MAX_LEN {
        return Err(inval(format!(
            "{what} {len} is larger than any address space (at most 2^56 bytes)"
        )));
    }
    Ok(len)
}

/// Writes `v` to `p` when `p` is not NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { p.write(v) };
    }
}

/// Copies `src` into the caller's `dst` (capacity checked by the caller).
///
/// # Safety
/// `dst` is valid for `src.len()` bytes of writes, or `src` is empty.
unsafe fn copy_out(src: &[u8], dst: *mut c_void) {
    if !src.is_empty() {
        // SAFETY: the caller's buffer holds at least `src.len()` bytes and is not `src`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.cast::<u8>(), src.len()) };
    }
}

/// The caller's metadata bytes.
///
/// # Safety
/// `meta` is valid for `len` bytes of reads when not NULL.
unsafe fn meta_arg<'a>(meta: *const c_void, len: usize) -> Result<&'a [u8], CapiError> {
    if len == 0 {
        return Ok(&[]);
    }
    if meta.is_null() {
        return Err(inval(format!("metadata is NULL but its length is {len}")));
    }
    // SAFETY: non-NULL and readable for `len` bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(meta.cast::<u8>(), len) })
}

pub(crate) fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Some(filter) = std::env::var_os("KIOKU_LOG").filter(|v| !v.is_empty()) {
            let filter = tracing_subscriber::EnvFilter::new(filter.to_string_lossy());
            // Refused when the process already has a subscriber: then that one logs.
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .try_init();
        }
    });
}

fn into_handle(engine: Engine, metadata: Vec<u8>) -> *mut EngineHandle {
    Box::into_raw(Box::new(EngineHandle {
        engine,
        metadata,
        broken: None,
    }))
}

/// `kioku_api_version` of kioku.h, which documents it.
#[no_mangle]
pub extern "C" fn kioku_api_version() -> u32 {
    KIOKU_API_VERSION
}

/// `kioku_version` of kioku.h, which documents it.
#[no_mangle]
pub extern "C" fn kioku_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// `kioku_strerror` of kioku.h, which documents it.
#[no_mangle]
pub extern "C" fn kioku_strerror(code: c_int) -> *const c_char {
    strerror(code).as_ptr().cast()
}

/// `kioku_last_error` of kioku.h, which documents it.
#[no_mangle]
pub extern "C" fn kioku_last_error() -> *const c_char {
    last_ptr()
}

/// `kioku_create` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_create(
    path: *const c_char,
    medium: *const c_char,
    out: *mut *mut EngineHandle,
) -> c_int {
    guard(|| {
        init_logging();
        if out.is_null() {
            return Err(inval("kioku_create: out is NULL"));
        }
        // SAFETY: C strings per kioku.h.
        let (path, medium) = unsafe { (path_arg(path)?, medium_arg(medium)?) };
        let opts = EngineOptions {
            medium,
            allow_rollback: false,
            ..Default::default()
        };
        let engine = Engine::create(path, &opts)?;
        // SAFETY: `out` is non-NULL and writable per kioku.h.
        unsafe { out.write(into_handle(engine, Vec::new())) };
        Ok(())
    })
}

/// `kioku_recover` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_recover(
    path: *const c_char,
    medium: *const c_char,
    out: *mut *mut EngineHandle,
    epoch_out: *mut u64,
    meta_buf: *mut c_void,
    meta_cap: usize,
    meta_len_out: *mut usize,
) -> c_int {
    if meta_cap > 0 && meta_len_out.is_null() {
        return guard(|| {
            Err(inval(
                "kioku_recover: meta_len_out is NULL but meta_cap > 0 (truncation would go unnoticed)",
            ))
        });
    }
    let mut info = Recovery::default();
    // SAFETY: arguments forwarded under the same contract.
    let rc = unsafe { kioku_recover_ex(path, medium, 0, out, &mut info, meta_buf, meta_cap) };
    if rc == KIOKU_OK {
        // SAFETY: NULL or writable per kioku.h.
        unsafe {
            put(epoch_out, info.epoch);
            put(meta_len_out, info.meta_len as usize);
        }
    }
    rc
}

/// `kioku_recover_ex` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_recover_ex(
    path: *const c_char,
    medium: *const c_char,
    flags: u32,
    out: *mut *mut EngineHandle,
    info_out: *mut Recovery,
    meta_buf: *mut c_void,
    meta_cap: usize,
) -> c_int {
    guard(|| {
        init_logging();
        if out.is_null() {
            return Err(inval("kioku_recover: out is NULL"));
        }
        if flags & !KIOKU_RECOVER_ALLOW_ROLLBACK != 0 {
            return Err(inval(format!("kioku_recover_ex: unknown flags {flags:#x}")));
        }
        if meta_cap > 0 && meta_buf.is_null() {
            return Err(inval("kioku_recover: meta_buf is NULL but meta_cap > 0"));
        }
        if meta_cap > 0 && info_out.is_null() {
            return Err(inval(
                "kioku_recover_ex: info_out is NULL but meta_cap > 0 (truncation would go unnoticed)",
            ));
        }
        // SAFETY: C strings per kioku.h.
        let (path, medium) = unsafe { (path_arg(path)?, medium_arg(medium)?) };
        let opts = EngineOptions {
            medium,
            allow_rollback: flags & KIOKU_RECOVER_ALLOW_ROLLBACK != 0,
            ..Default::default()
        };
        let (engine, rec) = Engine::recover(path, &opts)?;
        let info = Recovery {
            epoch: rec.epoch,
            time_ns: rec.time_ns,
            meta_len: rec.metadata.len() as u64,
            pages_synced: rec.pages_synced,
            source_ctx: rec.source_ctx as u32,
            used_copy: rec.used_copy as u32,
        };
        let n = rec.metadata.len().min(meta_cap);
        // SAFETY: meta_buf holds meta_cap >= n bytes (checked non-NULL when meta_cap > 0);
        // out and info_out are writable (or NULL for info_out) per kioku.h.
        unsafe {
            copy_out(&rec.metadata[..n], meta_buf);
            put(info_out, info);
            out.write(into_handle(engine, rec.metadata));
        }
        Ok(())
    })
}

/// `kioku_close` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_close(e: *mut EngineHandle) {
    if e.is_null() {
        return;
    }
    let _ = guard(|| {
        // SAFETY: a live handle from Box::into_raw, given back by its owner exactly once.
        drop(unsafe { Box::from_raw(e) });
        Ok(())
    });
}

/// `kioku_region_create` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_region_create(
    e: *mut EngineHandle,
    name: *const c_char,
    len: usize,
    addr: *mut c_void,
    reserve: usize,
    addr_out: *mut *mut c_void,
) -> c_int {
    let op = |h: &mut EngineHandle| {
        // SAFETY: C string per kioku.h.
        let name = unsafe { name_arg(name) }?;
        let len = len_arg("len", len)?;
        let reserve = len_arg("reserve", reserve)?;
        let opts = RegionOptions {
            addr: (!addr.is_null()).then_some(addr as usize),
            reserve: (reserve != 0).then_some(reserve),
        };
        let r = h.engine.create_region(name, len, opts)?;
        // SAFETY: NULL or writable per kioku.h.
        unsafe { put(addr_out, r.as_ptr().cast::<c_void>()) };
        Ok(())
    };
    // SAFETY: handle contract of kioku.h.
    unsafe { with_engine(e, "kioku_region_create", leaves_handle_usable, op) }
}

/// `kioku_region_lookup` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_region_lookup(
    e: *mut EngineHandle,
    name: *const c_char,
    addr_out: *mut *mut c_void,
    len_out: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle_ref(e) }
            .ok_or_else(|| inval("kioku_region_lookup: engine handle is NULL"))?;
        // SAFETY: C string per kioku.h.
        let name = unsafe { name_arg(name) }?;
        let r = h
            .engine
            .region(name)
            .ok_or_else(|| CkptError::NoSuchRegion { name: name.into() })?;
        // SAFETY: NULL or writable per kioku.h.
        unsafe {
            put(addr_out, r.as_ptr().cast::<c_void>());
            put(len_out, r.len);
        }
        Ok(())
    })
}

/// `kioku_region_resize` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_region_resize(
    e: *mut EngineHandle,
    name: *const c_char,
    new_len: usize,
) -> c_int {
    let op = |h: &mut EngineHandle| {
        // SAFETY: C string per kioku.h.
        let name = unsafe { name_arg(name) }?;
        h.engine.resize_region(name, len_arg("new_len", new_len)?)?;
        Ok(())
    };
    // SAFETY: handle contract of kioku.h.
    unsafe { with_engine(e, "kioku_region_resize", leaves_handle_usable, op) }
}

/// `kioku_region_delete` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_region_delete(e: *mut EngineHandle, name: *const c_char) -> c_int {
    let op = |h: &mut EngineHandle| {
        // SAFETY: C string per kioku.h.
        let name = unsafe { name_arg(name) }?;
        h.engine.delete_region(name)?;
        Ok(())
    };
    // SAFETY: handle contract of kioku.h.
    unsafe { with_engine(e, "kioku_region_delete", leaves_handle_usable, op) }
}

/// `kioku_region_count` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_region_count(e: *const EngineHandle) -> usize {
    // SAFETY: handle contract of kioku.h.
    unsafe { handle_ref(e) }.map_or(0, |h| h.engine.regions().len())
}

/// `kioku_region_at` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_region_at(
    e: *const EngineHandle,
    index: usize,
    name_buf: *mut c_char,
    name_cap: usize,
    addr_out: *mut *mut c_void,
    len_out: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle_ref(e) }
            .ok_or_else(|| inval("kioku_region_at: engine handle is NULL"))?;
        if name_cap > 0 && name_buf.is_null() {
            return Err(inval("kioku_region_at: name_buf is NULL but name_cap > 0"));
        }
        let regions = h.engine.regions();
        let r = regions.get(index).ok_or_else(|| CkptError::NoSuchRegion {
            name: format!("#{index} (there are {})", regions.len()),
        })?;
        let name = r.name.as_bytes();
        if name_cap <= name.len() {
            return Err(CapiError::Range(format!(
                "kioku_region_at: region name '{}' needs {} bytes with its NUL; name_cap is {name_cap}",
                r.name,
                name.len() + 1
            )));
        }
        // SAFETY: name_buf holds name_cap > name.len() bytes; the rest are NULL or writable.
        unsafe {
            copy_out(name, name_buf.cast());
            name_buf.add(name.len()).write(0);
            put(addr_out, r.as_ptr().cast::<c_void>());
            put(len_out, r.len);
        }
        Ok(())
    })
}

/// `kioku_checkpoint` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_checkpoint(
    e: *mut EngineHandle,
    meta: *const c_void,
    meta_len: usize,
    epoch_out: *mut u64,
) -> c_int {
    let mut stats = CheckpointStats::default();
    // SAFETY: arguments forwarded under the same contract.
    let rc = unsafe { kioku_checkpoint_ex(e, meta, meta_len, &mut stats) };
    if rc == KIOKU_OK {
        // SAFETY: NULL or writable per kioku.h.
        unsafe { put(epoch_out, stats.epoch) };
    }
    rc
}

/// `kioku_checkpoint_ex` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_checkpoint_ex(
    e: *mut EngineHandle,
    meta: *const c_void,
    meta_len: usize,
    stats_out: *mut CheckpointStats,
) -> c_int {
    let op = |h: &mut EngineHandle| {
        // SAFETY: `meta` readable for meta_len bytes per kioku.h.
        let meta = unsafe { meta_arg(meta, meta_len) }?;
        let s = h.engine.checkpoint(meta)?;
        h.metadata.clear();
        h.metadata.extend_from_slice(meta);
        let ns = |d: std::time::Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        let stats = CheckpointStats {
            epoch: s.epoch,
            dirty_pages: s.dirty_pages,
            dirty_bytes: s.dirty_bytes,
            scan_ns: ns(s.scan),
            persist_ns: ns(s.persist),
            sync_ns: ns(s.sync),
            total_ns: ns(s.total),
        };
        // SAFETY: NULL or writable per kioku.h.
        unsafe { put(stats_out, stats) };
        Ok(())
    };
    // A failed checkpoint may have consumed the tracker's record of written pages: never go on.
    // SAFETY: handle contract of kioku.h.
    unsafe { with_engine(e, "kioku_checkpoint", |_| false, op) }
}

/// `kioku_epoch` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_epoch(e: *const EngineHandle) -> u64 {
    // SAFETY: handle contract of kioku.h.
    unsafe { handle_ref(e) }.map_or(0, |h| h.engine.epoch())
}

/// `kioku_metadata` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says: NULL where allowed, else valid for the access it
/// describes; a handle is live and used by one thread at a time.
#[no_mangle]
pub unsafe extern "C" fn kioku_metadata(
    e: *const EngineHandle,
    buf: *mut c_void,
    buf_cap: usize,
    len_out: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle_ref(e) }
            .ok_or_else(|| inval("kioku_metadata: engine handle is NULL"))?;
        if len_out.is_null() {
            return Err(inval("kioku_metadata: len_out is NULL"));
        }
        if buf_cap > 0 && buf.is_null() {
            return Err(inval("kioku_metadata: buf is NULL but buf_cap > 0"));
        }
        let m = &h.metadata;
        // SAFETY: len_out is non-NULL and writable per kioku.h.
        unsafe { len_out.write(m.len()) };
        if m.len() > buf_cap {
            return Err(CapiError::Range(format!(
                "kioku_metadata: the metadata is {} bytes; buf_cap is {buf_cap}",
                m.len()
            )));
        }
        // SAFETY: buf holds buf_cap >= m.len() bytes.
        unsafe { copy_out(m, buf) };
        Ok(())
    })
}

// kioku.h lets any thread use a handle, one at a time. `Engine` is not `Send` only because
// it holds its tracker as `Box<dyn PageTracker>` (a trait without a `Send` bound); what it
// holds in this process — a pool, a `SelfSpace` and a `kioku_track::Tracker` — is `Send`, and
// none of it refers to thread-local state.
const _: () = {
    const fn send<T: Send>() {}
    send::<kioku_pool::Pool>();
    send::<kioku_ckpt::SelfSpace>();
    send::<kioku_track::Tracker>();
    send::<Vec<u8>>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn last() -> String {
        // SAFETY: kioku_last_error returns a NUL-terminated string owned by this thread.
        unsafe { CStr::from_ptr(kioku_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    fn new_engine(dir: &Path) -> *mut EngineHandle {
        let path = CString::new(dir.join("t.pool").as_os_str().as_bytes()).unwrap();
        let mut e = std::ptr::null_mut();
        // SAFETY: valid C strings and out-pointer.
        let rc = unsafe { kioku_create(path.as_ptr(), c"file".as_ptr(), &mut e) };
        assert_eq!(rc, KIOKU_OK, "{}", last());
        e
    }

    #[test]
    fn a_panic_becomes_internal_and_retires_the_handle() {
        let dir = tempfile::tempdir().unwrap();
        let e = new_engine(dir.path());
        // SAFETY: a live handle used by this thread only.
        let rc = unsafe { with_engine(e, "op", |_| true, |_| panic!("boom {}", 7)) };
        assert_eq!(rc, KIOKU_E_INTERNAL);
        assert!(
            last().contains("boom 7") && last().contains("bug"),
            "{}",
            last()
        );
        // SAFETY: as above.
        let rc = unsafe { kioku_checkpoint(e, std::ptr::null(), 0, std::ptr::null_mut()) };
        assert_eq!(rc, KIOKU_E_STATE);
        assert!(last().contains("close it and recover"), "{}", last());
        // SAFETY: the handle is closed once.
        unsafe { kioku_close(e) };
    }

    #[test]
    fn an_engine_error_retires_the_handle_only_when_it_may_have_changed_something() {
        let dir = tempfile::tempdir().unwrap();
        let e = new_engine(dir.path());
        let fail = |what: &'static str| CkptError::Os {
            what,
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        };
        // Refused before any change: the handle goes on.
        // SAFETY: a live handle used by this thread only.
        let rc = unsafe {
            with_engine(e, "op", leaves_handle_usable, |_| {
                Err(fail("reserve address space").into())
            })
        };
        assert_eq!(rc, KIOKU_E_NOMEM);
        // SAFETY: as above.
        assert_eq!(unsafe { kioku_region_count(e) }, 0);
        let name = c"r";
        // SAFETY: as above.
        let rc = unsafe {
            kioku_region_create(
                e,
                name.as_ptr(),
                1,
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, KIOKU_OK, "{}", last());
        // Failed half-way: refused from now on, with the first failure named.
        // SAFETY: as above.
        let rc = unsafe {
            with_engine(
                e,
                "op",
                leaves_handle_usable,
                |_| Err(fail("munmap").into()),
            )
        };
        assert_eq!(rc, KIOKU_E_NOMEM);
        // SAFETY: as above.
        let rc = unsafe { kioku_region_delete(e, name.as_ptr()) };
        assert_eq!(rc, KIOKU_E_STATE);
        assert!(last().contains("munmap"), "{}", last());
        // Read-only calls still answer.
        // SAFETY: as above.
        assert_eq!(unsafe { kioku_region_count(e) }, 1);
        let mut len = 0usize;
        // SAFETY: as above.
        let rc = unsafe { kioku_region_lookup(e, name.as_ptr(), std::ptr::null_mut(), &mut len) };
        assert_eq!((rc, len), (KIOKU_OK, 4096));
        // SAFETY: the handle is closed once.
        unsafe { kioku_close(e) };
    }

    #[test]
    fn engine_errors_map_to_their_codes() {
        use kioku_pool::{MediumError, PoolError};
        let p = std::path::PathBuf::from("/x");
        let cases: Vec<(CkptError, c_int)> = vec![
            (
                PoolError::NotFound { path: p.clone() }.into(),
                KIOKU_E_NOT_FOUND,
            ),
            (
                PoolError::LiveSlotDamaged {
                    path: p.clone(),
                    slot: 1,
                    detail: "crc".into(),
                    previous_epoch: 3,
                }
                .into(),
                KIOKU_E_ROLLBACK,
            ),
            (
                PoolError::Medium(MediumError::NotTmpfs { path: "/x".into() }).into(),
                KIOKU_E_MEDIUM,
            ),
            (
                MediumError::io("msync", &p, std::io::Error::from_raw_os_error(libc::EIO)).into(),
                KIOKU_E_IO,
            ),
            (PoolError::TooManySections { max: 64 }.into(), KIOKU_E_LIMIT),
            (CkptError::MetaDamaged { epoch: 2 }, KIOKU_E_CORRUPT),
            (CkptError::Misaligned { addr: 3 }, KIOKU_E_INVAL),
            (
                kioku_track::TrackError::TooManyRanges { max: 8 }.into(),
                KIOKU_E_TRACKER,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(CapiError::from(e).code(), code);
        }
    }

    #[test]
    fn huge_page_errors_map_to_their_codes() {
        use kioku_hugepage::HugeError;
        let cases: Vec<(HugeError, c_int)> = vec![
            (
                HugeError::NoHugetlbPages {
                    bytes: 1,
                    free: 0,
                    total: 0,
                },
                KIOKU_E_NO_HUGE_PAGES,
            ),
            (HugeError::InvalidSetting("x".into()), KIOKU_E_INVAL),
            (HugeError::ThreadGone("x".into()), KIOKU_E_STATE),
            (
                HugeError::Track(kioku_track::TrackError::ProcessGone { pid: 1 }),
                KIOKU_E_TRACKER,
            ),
            (
                HugeError::Sys {
                    what: "mmap",
                    source: std::io::Error::from_raw_os_error(libc::ENOMEM),
                },
                KIOKU_E_NOMEM,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(CapiError::from(e).code(), code);
        }
        assert_eq!(CapiError::Timeout("t".into()).code(), KIOKU_E_TIMEOUT);
    }

    #[test]
    fn last_error_is_per_thread_and_single_line() {
        set_last("one\ntwo\0three");
        assert_eq!(last(), "one two three");
        std::thread::spawn(|| assert_eq!(last(), ""))
            .join()
            .unwrap();
        assert_eq!(last(), "one two three");
    }
}
