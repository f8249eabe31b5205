//! kioku's transparent process checkpoints.
//!
//! `kioku run -- PROGRAM` starts an unmodified program under a ptrace monitor — in a pid
//! namespace of its own, with everything it starts (the process *tree*) traced too; the monitor
//! checkpoints the tree periodically into a pool (NDCKPT's two contexts, through `kioku-ckpt`),
//! and `kioku restore` rebuilds it from the last checkpoint — every process with its pid,
//! parent, process group and session; memory layout, private and shared memory, registers of
//! every thread (with their ids), brk, signal dispositions and masks, descriptors — after
//! SIGKILL, a crash of the monitor, or power loss. See `docs/run.md`.

#[cfg(not(target_arch = "x86_64"))]
compile_error!("kioku-run supports x86-64 only");

pub mod capture;
pub mod control;
pub mod error;
pub mod fds;
pub mod image;
pub mod journal;
pub mod monitor;
mod mountinfo;
pub mod procstate;
pub mod remote;
pub mod restore;
pub mod shadow;
mod sys;
pub mod wpcost;

pub use capture::{CaptureStats, Captured, Capturer, CheckpointReport};
pub use error::{Result, RunError};
pub use image::{ProcessImage, TreeImage};
pub use monitor::{Monitor, MonitorOptions, Summary};
