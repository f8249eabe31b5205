//! Reading and writing another process's memory: `process_vm_readv`/`process_vm_writev`, with
//! `/proc/PID/mem` as the fallback (it also writes read-only pages, as a debugger may).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;

use crate::error::{ProcError, Result};

fn vm_rw(pid: i32, addr: usize, local: *mut u8, len: usize, write: bool) -> io::Result<usize> {
    let l = libc::iovec {
        iov_base: local.cast(),
        iov_len: len,
    };
    let r = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `l` describes `len` bytes of a live buffer of the caller (read from for writes,
    // written to for reads); `r` is an address in the other process, checked by the kernel.
    let n = unsafe {
        if write {
            libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
        } else {
            libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
        }
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Reads `buf.len()` bytes at `addr` of process `pid`, all or an error.
pub fn read_mem(pid: i32, addr: usize, buf: &mut [u8]) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        match vm_rw(pid, addr + done, rest.as_mut_ptr(), rest.len(), false) {
            Ok(0) | Err(_) => break,
            Ok(n) => done += n,
        }
    }
    if done == buf.len() {
        return Ok(());
    }
    proc_mem(pid, addr + done, &mut buf[done..], None)
}

/// Writes `data` at `addr` of process `pid`, all or an error (read-only pages included).
pub fn write_mem(pid: i32, addr: usize, data: &[u8]) -> Result<()> {
    let mut done = 0;
    while done < data.len() {
        let rest = &data[done..];
        match vm_rw(pid, addr + done, rest.as_ptr() as *mut u8, rest.len(), true) {
            Ok(0) | Err(_) => break,
            Ok(n) => done += n,
        }
    }
    if done == data.len() {
        return Ok(());
    }
    proc_mem(pid, addr + done, &mut [], Some(&data[done..]))
}

fn proc_mem(pid: i32, addr: usize, read: &mut [u8], write: Option<&[u8]>) -> Result<()> {
    let (op, len) = match write {
        Some(w) => ("write", w.len()),
        None => ("read", read.len()),
    };
    let err = |source| ProcError::Memory {
        op,
        pid,
        addr,
        len,
        source,
    };
    let f = OpenOptions::new()
        .read(true)
        .write(write.is_some())
        .open(format!("/proc/{pid}/mem"))
        .map_err(err)?;
    match write {
        Some(w) => f.write_all_at(w, addr as u64).map_err(err),
        None => f.read_exact_at(read, addr as u64).map_err(err),
    }
}
