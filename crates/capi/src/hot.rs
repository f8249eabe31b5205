//! The hot-page and huge-page part of kioku.h: `kioku_hot_*` (kioku-hugepage's manager) and
//! `kioku_huge_*` (memory backed by huge pages). HPS's `hps_enable_track`,
//! `hps_disable_track`, `hps_set_functions` and `hps_wait_signal` are `kioku_hot_enable`,
//! `kioku_hot_disable`, `kioku_hot_set_callbacks` and `kioku_hot_wait`.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;
use std::time::Duration;

use kioku_hugepage::{
    ArenaId, BackendKind, CompactRequest, HugeKind, HugeMemory, Manager, Notice, PlaceReport,
    Policy,
};

use crate::{guard, init_logging, inval, len_arg, put, CapiError};

/// What C holds as `kioku_hot *`.
pub struct HotHandle {
    manager: Manager,
}

/// `struct kioku_hot_page` of kioku.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotPage {
    pub addr: u64,
    pub count: u32,
    pub hits: u32,
    pub seen: u32,
    pub pad: u32,
}

/// `struct kioku_hot_notice` of kioku.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotNotice {
    pub generation: u64,
    pub hot_pages: u64,
    pub new_hot: u64,
    pub promoted: u64,
    pub compacted: u64,
    pub settled: u32,
    pub pad: u32,
}

/// `struct kioku_hot_policy` of kioku.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HotPolicy {
    pub promote_fraction: f64,
    pub max_fill: f64,
    pub min_observed: u64,
    pub budget: u64,
    pub revisit_ms: u64,
    pub demote_fraction: f64,
}

/// `struct kioku_hot_report` of kioku.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotReport {
    pub decided: u64,
    pub promoted: u64,
    pub collapse_ns: u64,
    pub no_huge_page: u64,
    pub not_eligible: u64,
    pub demoted: u64,
    pub compacted_pages: u64,
    pub offered_pages: u64,
    pub compaction_errors: u64,
    pub over_budget: u64,
}

/// `struct kioku_hot_state` of kioku.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotStatus {
    pub enabled: u32,
    pub settled: u32,
    pub hot_pages: u64,
    pub promoted_ranges: u64,
    pub huge_pages_used: u64,
    pub tracked_pages: u64,
    pub sample_pages: u64,
    pub last_scan_ns: u64,
    pub totals: HotReport,
}

/// `kioku_hot_notify_fn` of kioku.h.
pub type HotNotifyFn = unsafe extern "C" fn(ctx: *mut c_void, notice: *const HotNotice);
/// `kioku_hot_compact_fn` of kioku.h.
pub type HotCompactFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    arena: u64,
    pages: *const HotPage,
    n_pages: usize,
    allowance_pages: usize,
    moved: *mut u8,
) -> c_int;

/// The caller's context pointer, handed to callbacks on the manager's thread.
#[derive(Clone, Copy)]
struct Ctx(*mut c_void);

// SAFETY: kioku.h makes the caller responsible for `ctx` being usable from the handle's thread
// (kioku_hot_set_callbacks: "ctx is passed to both, from the handle's thread").
unsafe impl Send for Ctx {}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

fn report_of(r: &PlaceReport) -> HotReport {
    HotReport {
        decided: r.decided as u64,
        promoted: r.promoted as u64,
        collapse_ns: ns(r.collapse_time),
        no_huge_page: r.no_huge_page as u64,
        not_eligible: r.not_eligible as u64,
        demoted: r.demoted as u64,
        compacted_pages: r.compacted_pages as u64,
        offered_pages: r.offered_pages as u64,
        compaction_errors: r.compaction_errors as u64,
        over_budget: r.over_budget as u64,
    }
}

fn notice_of(n: &Notice) -> HotNotice {
    HotNotice {
        generation: n.generation,
        hot_pages: n.hot_pages as u64,
        new_hot: n.new_hot as u64,
        promoted: n.promoted as u64,
        compacted: n.compacted as u64,
        settled: n.settled as u32,
        pad: 0,
    }
}

/// The handle behind `h`, or an error naming the function.
///
/// # Safety
/// `h` is NULL or a live handle from `kioku_hot_create`.
unsafe fn handle<'a>(h: *const HotHandle, what: &str) -> Result<&'a HotHandle, CapiError> {
    // SAFETY: NULL or a live handle (caller's contract); the manager is used through &self
    // methods, which synchronise internally, so several threads may share it.
    unsafe { h.as_ref() }.ok_or_else(|| inval(format!("{what}: handle is NULL")))
}

/// `kioku_hot_create` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_create(
    backend: *const c_char,
    period_ms: u32,
    threshold: u32,
    out: *mut *mut HotHandle,
) -> c_int {
    guard(|| {
        init_logging();
        if out.is_null() {
            return Err(inval("kioku_hot_create: out is NULL"));
        }
        let mut b = Manager::builder();
        if !backend.is_null() {
            // SAFETY: a NUL-terminated string per kioku.h.
            match unsafe { CStr::from_ptr(backend) }.to_bytes() {
                b"auto" => {}
                b"refault" => b = b.backend(BackendKind::Refault),
                b"protnone" => b = b.backend(BackendKind::ProtNone),
                other => {
                    return Err(inval(format!(
                        "kioku_hot_create: unknown backend {:?}; choose NULL, \"auto\", \"refault\" or \"protnone\"",
                        String::from_utf8_lossy(other)
                    )))
                }
            }
        }
        if period_ms > 0 {
            b = b.period(Duration::from_millis(period_ms as u64));
        }
        let threshold = match threshold {
            0 => 2,
            t => u8::try_from(t)
                .map_err(|_| inval(format!("kioku_hot_create: threshold {t} is above 255")))?,
        };
        let manager = b.threshold(threshold).build()?;
        // SAFETY: `out` is non-NULL and writable per kioku.h.
        unsafe { out.write(Box::into_raw(Box::new(HotHandle { manager }))) };
        Ok(())
    })
}

/// `kioku_hot_policy_default` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_policy_default(out: *mut HotPolicy) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(inval("kioku_hot_policy_default: out is NULL"));
        }
        let p = Policy::default();
        // SAFETY: non-NULL and writable per kioku.h.
        unsafe {
            out.write(HotPolicy {
                promote_fraction: p.promote_fraction,
                max_fill: p.max_fill,
                min_observed: p.min_observed as u64,
                budget: p.budget.map_or(0, |b| b as u64),
                revisit_ms: p.revisit.map_or(0, |d| d.as_millis() as u64),
                demote_fraction: p.demote_fraction,
            })
        };
        Ok(())
    })
}

/// `kioku_hot_set_policy` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_set_policy(
    h: *mut HotHandle,
    policy: *const HotPolicy,
) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_set_policy") }?;
        // SAFETY: NULL or readable per kioku.h.
        let p = unsafe { policy.as_ref() }
            .ok_or_else(|| inval("kioku_hot_set_policy: policy is NULL"))?;
        h.manager.set_policy(Policy {
            promote_fraction: p.promote_fraction,
            max_fill: p.max_fill,
            min_observed: p.min_observed as usize,
            budget: (p.budget > 0).then_some(p.budget as usize),
            revisit: (p.revisit_ms > 0).then(|| Duration::from_millis(p.revisit_ms)),
            demote_fraction: p.demote_fraction,
        })?;
        Ok(())
    })
}

/// `kioku_hot_register` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says; the memory stays mapped while registered.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_register(
    h: *mut HotHandle,
    addr: *mut c_void,
    len: usize,
    arena: u64,
) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_register") }?;
        let len = len_arg("len", len)?;
        if addr.is_null() {
            return Err(inval("kioku_hot_register: addr is NULL"));
        }
        h.manager.register(addr as *const u8, len, ArenaId(arena))?;
        Ok(())
    })
}

/// `kioku_hot_unregister` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_unregister(h: *mut HotHandle, addr: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_unregister") }?;
        h.manager.unregister(addr as *const u8)?;
        Ok(())
    })
}

/// `kioku_hot_enable` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_enable(h: *mut HotHandle) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        unsafe { handle(h, "kioku_hot_enable") }?.manager.enable()?;
        Ok(())
    })
}

/// `kioku_hot_disable` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_disable(h: *mut HotHandle) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        unsafe { handle(h, "kioku_hot_disable") }?
            .manager
            .disable()?;
        Ok(())
    })
}

/// `kioku_hot_set_callbacks` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says; the callbacks and `ctx` stay valid until replaced or the
/// handle is closed.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_set_callbacks(
    h: *mut HotHandle,
    notify: Option<HotNotifyFn>,
    compact: Option<HotCompactFn>,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_set_callbacks") }?;
        let ctx = Ctx(ctx);
        match notify {
            Some(f) => h.manager.on_notice(move |n: &Notice| {
                let c = ctx;
                let n = notice_of(n);
                // SAFETY: the caller's callback with its own ctx and a notice that lives for
                // the call (kioku.h).
                unsafe { f(c.0, &n) };
            }),
            None => h.manager.on_notice(|_| {}),
        }
        match compact {
            Some(f) => h.manager.set_compactor(Box::new(
                move |req: &CompactRequest<'_>, moved: &mut [bool]| {
                    let c = ctx;
                    let pages: Vec<HotPage> = req
                        .pages
                        .iter()
                        .map(|p| HotPage {
                            addr: p.addr as u64,
                            count: p.count as u32,
                            hits: p.hits,
                            seen: p.seen,
                            pad: 0,
                        })
                        .collect();
                    let mut flags = vec![0u8; pages.len()];
                    // SAFETY: the caller's callback; `pages` and `flags` hold n_pages entries
                    // each and live for the call.
                    let rc = unsafe {
                        f(
                            c.0,
                            req.arena.0,
                            pages.as_ptr(),
                            pages.len(),
                            req.allowance_pages,
                            flags.as_mut_ptr(),
                        )
                    };
                    for (m, f) in moved.iter_mut().zip(&flags) {
                        *m = *f != 0;
                    }
                    if rc < 0 {
                        return Err(format!("the compaction callback returned {rc}").into());
                    }
                    Ok(())
                },
            )),
            None => h.manager.clear_compactor(),
        }
        Ok(())
    })
}

/// `kioku_hot_wait` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_wait(
    h: *mut HotHandle,
    timeout_ms: i32,
    out: *mut HotNotice,
) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_wait") }?;
        if out.is_null() {
            return Err(inval("kioku_hot_wait: out is NULL"));
        }
        let timeout = (timeout_ms >= 0).then(|| Duration::from_millis(timeout_ms as u64));
        let n = h.manager.wait(timeout).ok_or_else(|| {
            CapiError::Timeout(format!("kioku_hot_wait: no notice within {timeout_ms} ms"))
        })?;
        // SAFETY: non-NULL and writable per kioku.h.
        unsafe { out.write(notice_of(&n)) };
        Ok(())
    })
}

/// `kioku_hot_fd` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_fd(h: *const HotHandle, fd_out: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_fd") }?;
        if fd_out.is_null() {
            return Err(inval("kioku_hot_fd: fd_out is NULL"));
        }
        // SAFETY: non-NULL and writable per kioku.h.
        unsafe { fd_out.write(h.manager.notify_fd()) };
        Ok(())
    })
}

/// `kioku_hot_pages` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_pages(
    h: *mut HotHandle,
    buf: *mut HotPage,
    cap: usize,
    n_out: *mut usize,
    total_out: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_pages") }?;
        if n_out.is_null() {
            return Err(inval("kioku_hot_pages: n_out is NULL"));
        }
        if cap > 0 && buf.is_null() {
            return Err(inval("kioku_hot_pages: buf is NULL but cap > 0"));
        }
        let mut v = Vec::new();
        h.manager.hot_pages(&mut v);
        let n = v.len().min(cap);
        for (i, p) in v.iter().take(n).enumerate() {
            // SAFETY: buf holds cap > i entries per kioku.h.
            unsafe {
                buf.add(i).write(HotPage {
                    addr: p.addr as u64,
                    count: p.count as u32,
                    hits: p.hits,
                    seen: p.seen,
                    pad: 0,
                })
            };
        }
        // SAFETY: non-NULL (checked) or NULL-or-writable per kioku.h.
        unsafe {
            n_out.write(n);
            put(total_out, v.len());
        }
        Ok(())
    })
}

/// `kioku_hot_place` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_place(h: *mut HotHandle, out: *mut HotReport) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_place") }?;
        let r = h.manager.place()?;
        // SAFETY: NULL or writable per kioku.h.
        unsafe { put(out, report_of(&r)) };
        Ok(())
    })
}

/// `kioku_hot_status` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_status(h: *const HotHandle, out: *mut HotStatus) -> c_int {
    guard(|| {
        // SAFETY: handle contract of kioku.h.
        let h = unsafe { handle(h, "kioku_hot_status") }?;
        if out.is_null() {
            return Err(inval("kioku_hot_status: out is NULL"));
        }
        let s = h.manager.status();
        let st = HotStatus {
            enabled: s.enabled as u32,
            settled: s.settled as u32,
            hot_pages: s.hot_pages as u64,
            promoted_ranges: s.promoted_ranges as u64,
            huge_pages_used: s.huge_pages_used as u64,
            tracked_pages: s.last_scan.tracked_pages as u64,
            sample_pages: s.last_scan.sample_pages as u64,
            last_scan_ns: ns(s.last_scan.work),
            totals: report_of(&s.totals),
        };
        // SAFETY: non-NULL and writable per kioku.h.
        unsafe { out.write(st) };
        Ok(())
    })
}

/// `kioku_hot_close` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says; the handle is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn kioku_hot_close(h: *mut HotHandle) {
    if h.is_null() {
        return;
    }
    let _ = guard(|| {
        // SAFETY: a live handle from Box::into_raw, given back by its owner exactly once.
        drop(unsafe { Box::from_raw(h) });
        Ok(())
    });
}

/// Huge memory handed out by `kioku_huge_map`, by first byte.
static HUGE: Mutex<BTreeMap<usize, HugeMemory>> = Mutex::new(BTreeMap::new());

/// `kioku_huge_map` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says.
#[no_mangle]
pub unsafe extern "C" fn kioku_huge_map(
    kind: *const c_char,
    len: usize,
    addr_out: *mut *mut c_void,
    len_out: *mut usize,
) -> c_int {
    guard(|| {
        if addr_out.is_null() {
            return Err(inval("kioku_huge_map: addr_out is NULL"));
        }
        let kind = if kind.is_null() {
            HugeKind::ThpAnon
        } else {
            // SAFETY: a NUL-terminated string per kioku.h.
            let k = unsafe { CStr::from_ptr(kind) }.to_string_lossy();
            k.parse::<HugeKind>()?
        };
        let len = len_arg("len", len)?;
        if len == 0 {
            return Err(inval("kioku_huge_map: len is 0"));
        }
        let mem = HugeMemory::map(kind, len)?;
        let (addr, l) = (mem.as_ptr(), mem.len());
        HUGE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(addr as usize, mem);
        // SAFETY: non-NULL (checked) or NULL-or-writable per kioku.h.
        unsafe {
            addr_out.write(addr.cast());
            put(len_out, l);
        }
        Ok(())
    })
}

/// `kioku_huge_unmap` of kioku.h, which documents it.
///
/// # Safety
/// Pointer arguments as kioku.h says; nothing uses the memory afterwards.
#[no_mangle]
pub unsafe extern "C" fn kioku_huge_unmap(addr: *mut c_void) -> c_int {
    guard(|| {
        let mem = HUGE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(addr as usize))
            .ok_or_else(|| {
                inval(format!(
                    "kioku_huge_unmap: {addr:p} is not the first byte of memory from kioku_huge_map"
                ))
            })?;
        drop(mem);
        Ok(())
    })
}
