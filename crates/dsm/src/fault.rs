//! Access detection by page protection: the SIGSEGV handler of the shared range.
//!
//! The handler does no DSM work itself (that takes locks and MCAPI calls, which are not
//! async-signal-safe). It hands the fault to the node's fault thread through a pipe and sleeps on
//! a futex until the page is usable; then the faulting instruction runs again. Faults outside
//! the shared range go to the handler that was there before.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};

static BASE: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// Pages allocated so far: an access beyond is outside any allocation.
pub static TOP: AtomicU32 = AtomicU32::new(0);
static PIPE: AtomicI32 = AtomicI32::new(-1);
static NODE: AtomicU32 = AtomicU32::new(0);
static mut OLD: Option<libc::sigaction> = None;

/// A fault in flight, on the faulting thread's stack.
#[repr(C)]
pub struct Fault {
    pub page: u32,
    pub write: bool,
    /// 0 pending, 1 served, 2 cannot be served.
    pub done: AtomicU32,
}

/// Installs the handler for the range `base..base + bytes`; faults go to `pipe`.
pub fn install(
    base: usize,
    bytes: usize,
    page: usize,
    node: u32,
    pipe: i32,
) -> std::io::Result<()> {
    BASE.store(base, Ordering::SeqCst);
    BYTES.store(bytes, Ordering::SeqCst);
    PAGE.store(page, Ordering::SeqCst);
    NODE.store(node, Ordering::SeqCst);
    TOP.store(0, Ordering::SeqCst);
    PIPE.store(pipe, Ordering::SeqCst);
    // SAFETY: a zeroed sigaction is a valid starting value; the handler has the SA_SIGINFO
    // signature; OLD is written once here, before the handler can run, and only read by it.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_segv as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSEGV, &sa, &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if old.sa_sigaction != on_segv as *const () as usize {
            OLD = Some(old);
        }
    }
    Ok(())
}

/// Stops routing faults to the DSM (the range is about to go away).
pub fn uninstall() {
    PIPE.store(-1, Ordering::SeqCst);
    BYTES.store(0, Ordering::SeqCst);
}

/// Marks a fault done and wakes its thread.
pub fn complete(f: &Fault, ok: bool) {
    f.done.store(if ok { 1 } else { 2 }, Ordering::Release);
    // SAFETY: FUTEX_WAKE on a live u32 on the faulting thread's stack, which waits for it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            f.done.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

fn say(parts: &[&[u8]]) {
    for p in parts {
        // SAFETY: write(2) is async-signal-safe; the buffer is valid.
        unsafe { libc::write(2, p.as_ptr() as *const libc::c_void, p.len()) };
    }
}

fn hex(mut x: usize, buf: &mut [u8; 18]) -> &[u8] {
    buf[0] = b'0';
    buf[1] = b'x';
    for i in (2..18).rev() {
        buf[i] = b"0123456789abcdef"[x & 15];
        x >>= 4;
    }
    &buf[..]
}

fn dec(mut x: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = 10;
    loop {
        i -= 1;
        buf[i] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            break;
        }
    }
    &buf[i..]
}

extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SIGSEGV.
    let addr = unsafe { (*info).si_addr() } as usize;
    let base = BASE.load(Ordering::Acquire);
    let bytes = BYTES.load(Ordering::Acquire);
    let pipe = PIPE.load(Ordering::Acquire);
    if pipe < 0 || addr < base || addr >= base + bytes {
        // Not ours: put back the previous disposition; the access faults again and goes there.
        // SAFETY: OLD was written before the handler was installed; sigaction is
        // async-signal-safe.
        unsafe {
            #[allow(static_mut_refs)]
            match OLD.as_ref() {
                Some(old) => {
                    libc::sigaction(sig, old, std::ptr::null_mut());
                }
                None => {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
        }
        return;
    }
    let page_size = PAGE.load(Ordering::Relaxed);
    let page = ((addr - base) / page_size) as u32;
    let (mut b1, mut b2, mut b3) = ([0u8; 18], [0u8; 10], [0u8; 18]);
    if page >= TOP.load(Ordering::Acquire) {
        let top = base + TOP.load(Ordering::Acquire) as usize * page_size;
        say(&[
            b"kioku-dsm: node ",
            dec(NODE.load(Ordering::Relaxed), &mut b2),
            b": access to shared address ",
            hex(addr, &mut b1),
            b", outside any allocation (allocated: up to ",
            hex(top, &mut b3),
            b"); aborting\n",
        ]);
        // SAFETY: abort is async-signal-safe.
        unsafe { libc::abort() };
    }
    // x86_64: bit 1 of the page-fault error code says the access was a write.
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    let write = unsafe {
        let uc = ctx as *const libc::ucontext_t;
        (*uc).uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0
    };
    let f = Fault {
        page,
        write,
        done: AtomicU32::new(0),
    };
    let p = &f as *const Fault as usize;
    // SAFETY: write(2) of 8 bytes from a live local; a pipe write of ≤ PIPE_BUF is atomic.
    let n = unsafe { libc::write(pipe, &p as *const usize as *const libc::c_void, 8) };
    if n != 8 {
        say(&[b"kioku-dsm: the fault thread is gone; aborting\n"]);
        // SAFETY: abort is async-signal-safe.
        unsafe { libc::abort() };
    }
    while f.done.load(Ordering::Acquire) == 0 {
        // SAFETY: FUTEX_WAIT on a live local u32 with its expected value; spurious wakes loop.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                f.done.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                0,
                std::ptr::null::<libc::timespec>(),
            );
        }
    }
    if f.done.load(Ordering::Acquire) != 1 {
        say(&[
            b"kioku-dsm: node ",
            dec(NODE.load(Ordering::Relaxed), &mut b2),
            b": shared page at ",
            hex(base + page as usize * page_size, &mut b1),
            b" cannot be fetched (see the log above); aborting\n",
        ]);
        // SAFETY: abort is async-signal-safe.
        unsafe { libc::abort() };
    }
}
