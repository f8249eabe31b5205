//! Thin wrappers over the system calls and /proc files the monitor reads directly (no
//! injection): bulk memory copies, per-thread signal state, robust lists, rseq.

use std::io;

use kioku_track::PageRange;

use crate::error::{Result, RunError};

/// `PTRACE_GETSIGMASK` / `PTRACE_SETSIGMASK` (Linux 3.11).
const PTRACE_GETSIGMASK: libc::c_uint = 0x420a;
const PTRACE_SETSIGMASK: libc::c_uint = 0x420b;
/// `PTRACE_GET_RSEQ_CONFIGURATION` (Linux 5.13).
const PTRACE_GET_RSEQ_CONFIGURATION: libc::c_uint = 0x420f;

/// Most iovecs one process_vm_readv/writev takes (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// Copies `(remote, local, len)` chunks between process `pid` and this process: out of the
/// program when `read`, into it otherwise. All bytes or an error.
pub fn copy_pages(pid: i32, chunks: &[(usize, usize, usize)], read: bool) -> Result<u64> {
    let mut total = 0u64;
    for batch in chunks.chunks(IOV_MAX) {
        let iov = |addr: usize, len: usize| libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        let (remote, local): (Vec<libc::iovec>, Vec<libc::iovec>) = batch
            .iter()
            .map(|&(r, l, n)| (iov(r, n), iov(l, n)))
            .unzip();
        let want: usize = batch.iter().map(|c| c.2).sum();
        let mut done = 0usize;
        // A partial transfer stops at the first failing iovec; resume after it.
        let (mut li, mut ri) = (local, remote);
        while done < want {
            // SAFETY: every local iovec lies inside an engine region of this process, mapped
            // and writable (or readable) for its whole length; the kernel checks the remote
            // side.
            let n = unsafe {
                if read {
                    libc::process_vm_readv(
                        pid,
                        li.as_ptr(),
                        li.len() as libc::c_ulong,
                        ri.as_ptr(),
                        ri.len() as libc::c_ulong,
                        0,
                    )
                } else {
                    libc::process_vm_writev(
                        pid,
                        li.as_ptr(),
                        li.len() as libc::c_ulong,
                        ri.as_ptr(),
                        ri.len() as libc::c_ulong,
                        0,
                    )
                }
            };
            if n < 0 {
                return Err(RunError::io(
                    if read {
                        "copying the program's pages (process_vm_readv)"
                    } else {
                        "writing the program's pages (process_vm_writev)"
                    },
                    io::Error::last_os_error(),
                ));
            }
            if n == 0 {
                return Err(RunError::io(
                    "copying the program's pages",
                    io::Error::from_raw_os_error(libc::EFAULT),
                ));
            }
            done += n as usize;
            advance(&mut li, n as usize);
            advance(&mut ri, n as usize);
        }
        total += want as u64;
    }
    Ok(total)
}

fn advance(v: &mut Vec<libc::iovec>, mut n: usize) {
    let mut skip = 0;
    for io in v.iter_mut() {
        if n == 0 {
            break;
        }
        if n >= io.iov_len {
            n -= io.iov_len;
            skip += 1;
        } else {
            io.iov_base = (io.iov_base as usize + n) as *mut libc::c_void;
            io.iov_len -= n;
            n = 0;
        }
    }
    v.drain(..skip);
}

/// `PTRACE_PEEKSIGINFO` (Linux 3.10) and its flag for the process-wide queue.
const PTRACE_PEEKSIGINFO: libc::c_uint = 0x4209;
const PTRACE_PEEKSIGINFO_SHARED: u32 = 1;
/// Bytes of a `siginfo_t`.
pub const SIGINFO_LEN: usize = 128;

/// The signals queued for stopped tracee thread `tid` (`shared`: for its whole process), each
/// as the bytes of its `siginfo_t`, without taking them out.
pub fn queued_signals(tid: i32, shared: bool) -> Result<Vec<Vec<u8>>> {
    #[repr(C)]
    struct Args {
        off: u64,
        flags: u32,
        nr: i32,
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; SIGINFO_LEN * 32];
    loop {
        let args = Args {
            off: out.len() as u64,
            flags: if shared { PTRACE_PEEKSIGINFO_SHARED } else { 0 },
            nr: 32,
        };
        // SAFETY: the kernel reads `args` and writes at most `nr` siginfo_t into `buf`, which
        // holds 32 of them.
        let n = unsafe {
            libc::ptrace(
                PTRACE_PEEKSIGINFO,
                tid,
                &args as *const Args as *mut libc::c_void,
                buf.as_mut_ptr() as *mut libc::c_void,
            )
        };
        if n < 0 {
            return Err(RunError::io(
                "PTRACE_PEEKSIGINFO",
                io::Error::last_os_error(),
            ));
        }
        for i in 0..n as usize {
            out.push(buf[i * SIGINFO_LEN..(i + 1) * SIGINFO_LEN].to_vec());
        }
        if (n as usize) < 32 {
            return Ok(out);
        }
    }
}

/// Writes `data` at `addr` of process `pid` (through /proc/PID/mem).
pub fn write_remote(pid: i32, addr: usize, data: &[u8]) -> Result<()> {
    kioku_proc::write_mem(pid, addr, data).map_err(Into::into)
}

/// Blocked signals of stopped tracee thread `tid`.
pub fn get_sigmask(tid: i32) -> Result<u64> {
    let mut mask = 0u64;
    // SAFETY: the kernel writes 8 bytes into `mask`.
    let r = unsafe {
        libc::ptrace(
            PTRACE_GETSIGMASK,
            tid,
            8usize as *mut libc::c_void,
            &mut mask as *mut u64,
        )
    };
    if r < 0 {
        return Err(RunError::io(
            "PTRACE_GETSIGMASK",
            io::Error::last_os_error(),
        ));
    }
    Ok(mask)
}

/// Sets the blocked signals of stopped tracee thread `tid`.
pub fn set_sigmask(tid: i32, mask: u64) -> Result<()> {
    // SAFETY: the kernel reads 8 bytes from `mask`.
    let r = unsafe {
        libc::ptrace(
            PTRACE_SETSIGMASK,
            tid,
            8usize as *mut libc::c_void,
            &mask as *const u64,
        )
    };
    if r < 0 {
        return Err(RunError::io(
            "PTRACE_SETSIGMASK",
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The rseq registration of stopped tracee thread `tid`: (area, length, signature).
pub fn rseq_config(tid: i32) -> Result<(u64, u32, u32)> {
    #[repr(C)]
    #[derive(Default)]
    struct Conf {
        ptr: u64,
        size: u32,
        sig: u32,
        flags: u32,
        pad: u32,
    }
    let mut c = Conf::default();
    // SAFETY: the kernel writes at most `size_of::<Conf>()` bytes into `c`.
    let r = unsafe {
        libc::ptrace(
            PTRACE_GET_RSEQ_CONFIGURATION,
            tid,
            std::mem::size_of::<Conf>() as *mut libc::c_void,
            &mut c as *mut Conf,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        // Kernels without CONFIG_RSEQ (or older than 5.13): no rseq to restore.
        if matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL)) {
            return Ok((0, 0, 0));
        }
        return Err(RunError::io("PTRACE_GET_RSEQ_CONFIGURATION", e));
    }
    Ok((c.ptr, c.size, c.sig))
}

/// The robust futex list of thread `tid`: (head, length).
pub fn robust_list(tid: i32) -> Result<(u64, u64)> {
    let mut head = 0u64;
    let mut len = 0usize;
    // SAFETY: the kernel writes one pointer and one size_t.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_robust_list,
            tid,
            &mut head as *mut u64,
            &mut len as *mut usize,
        )
    };
    if r < 0 {
        return Err(RunError::io("get_robust_list", io::Error::last_os_error()));
    }
    Ok((head, len as u64))
}

/// A line `Key:\t<hex>` of /proc/…/status as a number.
pub fn status_mask(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

pub fn read_proc(path: String) -> Result<String> {
    kioku_proc::read_proc_file(&path).map_err(|e| RunError::io(format!("reading {path}"), e))
}

/// A /proc file the kernel shows as one record (`status`, `stat`, `fdinfo/N`: `single_open`
/// files): a read shorter than the buffer returned all of it, so no second read is needed to
/// find its end (one system call less per file and stop). Not for files of many records
/// (`maps`), whose reads may end short of the buffer before the end.
pub fn read_proc_record(path: String) -> Result<String> {
    use std::io::Read;
    let fail = |e| RunError::io(format!("reading {path}"), e);
    let mut f = std::fs::File::open(&path).map_err(fail)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    break;
                }
                buf.resize(buf.len() * 2, 0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(fail(e)),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| fail(std::io::ErrorKind::InvalidData.into()))
}

/// A /proc file kept open from one stop to the next and read again from its start with
/// `pread` (the kernel generates a `seq_file` afresh at offset 0): a stop pays no path lookup,
/// `open` or `close` for it. `maps` keeps the address space it was opened on: open it again
/// after an exec. A file whose process or thread is gone (its id perhaps reused since) fails
/// to read; [`ProcFile::read`] then opens the path again once.
pub struct ProcFile {
    path: String,
    /// One record (`status`, `stat`): a read shorter than the buffer returned all of it.
    record: bool,
    file: std::fs::File,
}

impl ProcFile {
    pub fn open(path: String, record: bool) -> Result<ProcFile> {
        let file =
            std::fs::File::open(&path).map_err(|e| RunError::io(format!("opening {path}"), e))?;
        Ok(ProcFile { path, record, file })
    }

    /// The file's whole text now.
    pub fn read(&mut self) -> Result<String> {
        match self.read_from_start() {
            Ok(s) => Ok(s),
            Err(_) => {
                *self = ProcFile::open(std::mem::take(&mut self.path), self.record)?;
                self.read_from_start()
                    .map_err(|e| RunError::io(format!("reading {}", self.path), e))
            }
        }
    }

    fn read_from_start(&self) -> std::io::Result<String> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; 4096];
        let mut len = 0;
        loop {
            match self.file.read_at(&mut buf[len..], len as u64) {
                Ok(0) => break,
                Ok(n) => {
                    len += n;
                    if self.record && len < buf.len() {
                        break;
                    }
                    if len == buf.len() {
                        buf.resize(buf.len() * 2, 0);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(len);
        String::from_utf8(buf).map_err(|_| std::io::ErrorKind::InvalidData.into())
    }
}

/// Ranges in `a` but not in `b`; both sorted and non-overlapping.
pub fn subtract(a: &[PageRange], b: &[PageRange]) -> Vec<PageRange> {
    let mut out = Vec::new();
    let mut j = 0;
    for r in a {
        let mut start = r.start;
        while j < b.len() && b[j].end <= start {
            j += 1;
        }
        let mut k = j;
        while start < r.end {
            match b.get(k) {
                Some(x) if x.start < r.end => {
                    if x.start > start {
                        out.push(PageRange::new(start, x.start));
                    }
                    start = start.max(x.end);
                    k += 1;
                }
                _ => {
                    out.push(PageRange::new(start, r.end));
                    break;
                }
            }
        }
    }
    out
}

/// Ranges in both `a` and `b`; both sorted and non-overlapping.
pub fn intersect(a: &[PageRange], b: &[PageRange]) -> Vec<PageRange> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let lo = a[i].start.max(b[j].start);
        let hi = a[i].end.min(b[j].end);
        if lo < hi {
            out.push(PageRange::new(lo, hi));
        }
        if a[i].end < b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Sorts and merges overlapping or touching ranges.
pub fn normalize(v: &mut Vec<PageRange>) {
    v.retain(|r| !r.is_empty());
    v.sort_unstable();
    let mut out: Vec<PageRange> = Vec::with_capacity(v.len());
    for r in v.drain(..) {
        match out.last_mut() {
            Some(l) if r.start <= l.end => l.end = l.end.max(r.end),
            _ => out.push(r),
        }
    }
    *v = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(a: usize, b: usize) -> PageRange {
        PageRange::new(a, b)
    }

    #[test]
    fn range_algebra() {
        let a = vec![r(0, 10), r(20, 30)];
        let b = vec![r(5, 8), r(9, 22), r(29, 40)];
        assert_eq!(subtract(&a, &b), vec![r(0, 5), r(8, 9), r(22, 29)]);
        assert_eq!(
            intersect(&a, &b),
            vec![r(5, 8), r(9, 10), r(20, 22), r(29, 30)]
        );
        assert_eq!(subtract(&a, &[]), a);
        assert_eq!(intersect(&a, &[]), vec![]);
        let mut v = vec![r(5, 6), r(0, 2), r(2, 3), r(10, 12), r(11, 13)];
        normalize(&mut v);
        assert_eq!(v, vec![r(0, 3), r(5, 6), r(10, 13)]);
    }

    #[test]
    fn status_masks_parse() {
        let s = "Name:\tx\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\nSigCgt:\t0000000180004a02\n";
        assert_eq!(status_mask(s, "SigPnd"), 0x100);
        assert_eq!(status_mask(s, "SigCgt"), 0x1_8000_4a02);
        assert_eq!(status_mask(s, "Missing"), 0);
    }
}
