//! kioku's process monitor: runs an unmodified program under ptrace so that its memory can be
//! moved onto pool pages and checkpointed.
//!
//! * [`Tracee`] — spawn a program stopped before its first instruction, or seize a running
//!   one; stop and resume all its threads; signals pass through; exit status reported.
//! * Registers — [`Regs`] (general, with fs_base/gs_base), [`FpState`] (XSAVE area or FXSAVE),
//!   [`ThreadState`] (both, as versioned bytes for a checkpoint's metadata).
//! * Injection — [`Tracee::syscall`] and wrappers (`mmap`, `munmap`, `mprotect`, `mremap`,
//!   `madvise`, `openat`, `close`, `userfaultfd`, `prctl`) run system calls inside a stopped
//!   thread and restore it exactly, including a blocking call it was stopped in.
//! * Memory — [`read_mem`]/[`write_mem`] and [`read_maps`] (typed /proc/PID/maps).
//! * [`TracedSpace`] — the checkpoint engine's `AddressSpace` for a stopped tracee.
//!
//! ```no_run
//! use kioku_proc::{Tracee, TraceeCommand};
//! # fn main() -> Result<(), kioku_proc::ProcError> {
//! let t = Tracee::spawn(TraceeCommand::new("/bin/true"))?; // stopped at its entry point
//! let tid = t.control_thread()?;
//! let page = t.mmap(tid, 0, 4096, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)?;
//! t.munmap(tid, page, 4096)?;
//! let exit = t.wait_exit()?; // runs it, passing its signals through
//! # Ok(()) }
//! ```
//!
//! x86-64 only. See `docs/proc.md` for guarantees, failure modes and kernel requirements.

#![warn(missing_docs)]

#[cfg(not(target_arch = "x86_64"))]
compile_error!("kioku-proc supports x86-64 only");

mod error;
mod inject;
pub mod maps;
mod mem;
pub mod ns;
pub mod regs;
mod space;
mod sys;
mod tracee;
mod tree;

pub use error::{ProcError, Result};
pub use inject::UFFD_USER_MODE_ONLY;
pub use maps::{parse_maps, read_maps, MapEntry, MapKind, Perms};
pub use mem::{read_mem, write_mem};
pub use ns::{Namespace, NamespaceKind};
pub use regs::{FpKind, FpState, Regs, ThreadState};
pub use space::{tracker_for, TracedSpace};
pub use sys::read_small as read_proc_file;
pub use tracee::{list_threads, Exit, Notice, Tracee, TraceeCommand};
pub use tree::{TrapHandler, Tree};
