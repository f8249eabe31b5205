//! What a checkpoint of a process tree holds besides memory contents: for every process, the
//! layout of its address space, its threads' registers, signal dispositions, descriptors, its
//! place in the tree (parent, process group, session) and the identity of every file it maps;
//! the shared-memory objects of the tree — the checkpoint engine's metadata for one epoch, as
//! versioned JSON.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, RunError};

/// Version of the image encoding this kioku writes and reads (2: process trees).
pub const IMAGE_VERSION: u32 = 2;
/// Leading bytes of the metadata, so other programs' checkpoint pools are told apart.
const MAGIC: &[u8; 8] = b"KIOKUPRC";

/// One checkpoint of a process tree.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TreeImage {
    pub version: u32,
    /// Process and thread ids are those of a pid namespace of the tree's own (a restore gets
    /// them back); `false`: the host's (a restore gives new ones; only a single process can
    /// be restored then).
    pub pid_namespace: bool,
    /// The process whose exit `kioku` passes on (the one `kioku run` started).
    pub root: i32,
    /// How the root ended, when it did while other processes of the tree run on.
    pub root_exit: Option<ExitImage>,
    /// Every process, parents before their children.
    pub processes: Vec<ProcessImage>,
    /// Shared-memory objects (MAP_SHARED mappings, memfds) and the regions holding them.
    pub shared: Vec<SharedImage>,
    /// Every descriptor of every process.
    pub fds: crate::fds::FdTable,
    /// Whether the file journal kept what the tree changed in files: a restore then returns
    /// the files to this checkpoint first.
    pub journal: bool,
    /// Set on the last record of a tree that ended: nothing to restore.
    pub finished: Option<String>,
    /// The most recent checkpoints (this one last): how much each copied and stopped.
    pub recent: Vec<EpochStat>,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitImage {
    Code(i32),
    Signal(i32),
}

impl ExitImage {
    pub fn of(e: kioku_proc::Exit) -> ExitImage {
        match e {
            kioku_proc::Exit::Code(c) => ExitImage::Code(c),
            kioku_proc::Exit::Signal { sig, .. } => ExitImage::Signal(sig),
        }
    }

    pub fn exit(self) -> kioku_proc::Exit {
        match self {
            ExitImage::Code(c) => kioku_proc::Exit::Code(c),
            ExitImage::Signal(sig) => kioku_proc::Exit::Signal { sig, core: false },
        }
    }
}

/// One process of the tree.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessImage {
    /// Process id (in the tree's namespace, see [`TreeImage::pid_namespace`]).
    pub pid: i32,
    /// Parent (1: the namespace's init, or outside the tree).
    pub ppid: i32,
    /// Process group and session (0: outside the namespace).
    pub pgid: i32,
    pub sid: i32,
    /// Signal the parent gets when it ends (SIGCHLD, or another given to clone).
    pub exit_signal: i32,
    /// An ended process its parent has not reaped yet: it comes back as a zombie with this
    /// status, and nothing else of it is kept.
    pub zombie: Option<ExitImage>,
    /// The executable.
    pub program: FileId,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// Every mapping, by address.
    pub vmas: Vec<Vma>,
    /// Captured memory areas (contiguous runs of captured mappings) and their regions.
    pub areas: Vec<Area>,
    /// The mm fields `prctl(PR_SET_MM_MAP)` restores.
    pub mm: MmFields,
    /// The auxiliary vector (`/proc/PID/auxv`).
    pub auxv: Vec<u64>,
    /// Threads; the first is the leader.
    pub threads: Vec<ThreadImage>,
    /// Signal dispositions other than the default.
    pub sigactions: Vec<SigAction>,
    /// Signals pending for the whole process (bit n-1 for signal n).
    pub shared_pending: u64,
    /// The signals queued for the whole process, each a `siginfo_t` (hex), oldest first.
    #[serde(default)]
    pub shared_queued: Vec<String>,
    /// CRC-32C of the vdso: a restore needs the same kernel code at the same place.
    pub vdso_crc: Option<u32>,
    /// Process-wide kernel state (limits, timers, umask…); none for a zombie.
    pub state: Option<crate::procstate::ProcessState>,
    /// Whether its seccomp filters include the file journal's escalation (its standard
    /// streams are watched too).
    pub escalated: bool,
    /// Identities of mapped files (index = `Backing::File::index`).
    pub files: Vec<FileId>,
}

/// A shared-memory object: what several mappings (of one or more processes) see alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedImage {
    /// Names it in `Backing::Shared`.
    pub id: u32,
    pub kind: SharedKind,
    /// Object offsets `[lo, hi)` the region holds (what the tree maps of it).
    pub lo: u64,
    pub hi: u64,
    /// The object's size (a memfd's or file's length; at least `hi`).
    pub size: u64,
    /// The exact length of a memfd the tree held through a descriptor only (its region covers
    /// whole pages): the restore cuts the object to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// The engine region holding those bytes.
    pub region: String,
}

/// What a shared-memory object is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SharedKind {
    /// MAP_SHARED | MAP_ANONYMOUS memory (shared between a process and its forks).
    Anonymous,
    /// A memfd (`memfd_create(name)`).
    Memfd { name: String },
    /// A regular file mapped shared: its mapped bytes at the checkpoint are written back into
    /// it at restore. `deleted`: the file had no name any more; it comes back as a new
    /// unnamed file in the same directory — as it does when the name now belongs to another
    /// file (`inode` differs: replaced by someone else; that file is left alone).
    File {
        path: PathBuf,
        deleted: bool,
        #[serde(default)]
        inode: u64,
    },
}

/// One checkpoint's cost, kept in the image for `kioku inspect`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochStat {
    pub epoch: u64,
    pub unix_ns: u64,
    pub copied_bytes: u64,
    pub stop_us: u64,
}

/// A file as identified at checkpoint time; compared at restore.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub path: PathBuf,
    pub size: u64,
    pub mtime_ns: i128,
    /// GNU build-id of an ELF file, hex.
    pub build_id: Option<String>,
}

impl FileId {
    /// Identifies `path` now.
    pub fn of(path: &Path) -> Result<FileId> {
        let md = std::fs::metadata(path)
            .map_err(|e| RunError::io(format!("stat {}", path.display()), e))?;
        Ok(FileId {
            path: path.to_path_buf(),
            size: md.size(),
            mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
            build_id: build_id(path),
        })
    }

    /// Why `now` is not the same file, if it is not.
    pub fn differs(&self, now: &FileId) -> Option<String> {
        if self.build_id.is_some() && now.build_id.is_some() && self.build_id != now.build_id {
            return Some(format!(
                "build-id {} → {}",
                self.build_id.as_deref().unwrap_or("-"),
                now.build_id.as_deref().unwrap_or("-")
            ));
        }
        if self.size != now.size {
            return Some(format!("size {} → {} bytes", self.size, now.size));
        }
        if self.mtime_ns != now.mtime_ns {
            return Some("modification time differs".into());
        }
        None
    }
}

/// The GNU build-id note of an ELF file, if it has one.
fn build_id(path: &Path) -> Option<String> {
    use object::Object;
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let id = file.build_id().ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// What backs a mapping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Backing {
    Anonymous,
    /// `files[index]` at `offset`.
    File {
        index: usize,
        offset: u64,
    },
    /// The vdso, or one of the vvar pages.
    Special {
        name: String,
    },
    /// `TreeImage::shared[object]` at `offset`, mapped shared.
    Shared {
        object: u32,
        offset: u64,
    },
}

/// One mapping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vma {
    pub start: usize,
    pub end: usize,
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    pub shared: bool,
    /// Grows down (the main stack).
    pub grows_down: bool,
    pub backing: Backing,
    /// Contents are captured (its pages belong to an area).
    pub captured: bool,
}

impl Vma {
    pub fn prot(&self) -> i32 {
        (if self.read { libc::PROT_READ } else { 0 })
            | (if self.write { libc::PROT_WRITE } else { 0 })
            | (if self.exec { libc::PROT_EXEC } else { 0 })
    }
}

/// A captured range of the address space and the engine region holding its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Area {
    pub start: usize,
    pub end: usize,
    pub region: String,
}

/// mm_struct fields (the layout of `struct prctl_mm_map`, without auxv and exe_fd).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmFields {
    pub start_code: u64,
    pub end_code: u64,
    pub start_data: u64,
    pub end_data: u64,
    pub start_brk: u64,
    pub brk: u64,
    pub start_stack: u64,
    pub arg_start: u64,
    pub arg_end: u64,
    pub env_start: u64,
    pub env_end: u64,
}

/// One thread.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadImage {
    pub tid: i32,
    /// `ThreadState::to_bytes`, hex.
    pub state: String,
    /// Blocked signals.
    pub sigmask: u64,
    /// Pending for this thread.
    pub pending: u64,
    /// The signals queued for this thread, each a `siginfo_t` (hex), oldest first.
    #[serde(default)]
    pub queued: Vec<String>,
    /// `set_tid_address` (clear_child_tid).
    pub tid_address: u64,
    pub robust_list: (u64, u64),
    /// rseq area, its length and signature (0 length: none).
    pub rseq: (u64, u32, u32),
    /// Per-thread kernel state (signal stack, name, timer slack…).
    pub kernel: crate::procstate::ThreadState,
}

/// A non-default signal disposition (`struct kernel_sigaction`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigAction {
    pub sig: i32,
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
}

impl TreeImage {
    /// The process `pid`.
    pub fn process(&self, pid: i32) -> Option<&ProcessImage> {
        self.processes.iter().find(|p| p.pid == pid)
    }

    /// The root process, unless it has ended.
    pub fn root_process(&self) -> Option<&ProcessImage> {
        self.process(self.root).filter(|p| p.zombie.is_none())
    }

    /// The engine metadata: magic, then JSON.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&serde_json::to_vec(self).expect("image serialises"));
        out
    }

    /// Decodes engine metadata written by [`TreeImage::encode`].
    pub fn decode(b: &[u8]) -> Result<TreeImage> {
        if b.is_empty() {
            return Err(RunError::NoCheckpoint);
        }
        if b.len() < MAGIC.len() || &b[..MAGIC.len()] != MAGIC {
            return Err(RunError::NotAProcessCheckpoint {
                detail: "checkpoint metadata does not start with the process-image magic".into(),
            });
        }
        let v: serde_json::Value = serde_json::from_slice(&b[MAGIC.len()..]).map_err(|e| {
            RunError::NotAProcessCheckpoint {
                detail: format!("process image does not parse: {e}"),
            }
        })?;
        let found = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0) as u32;
        if found != IMAGE_VERSION {
            return Err(RunError::Version {
                found,
                supported: IMAGE_VERSION,
            });
        }
        serde_json::from_value(v).map_err(|e| RunError::NotAProcessCheckpoint {
            detail: format!("process image does not parse: {e}"),
        })
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&b)).unwrap(), b);
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
    }

    #[test]
    fn foreign_metadata_is_refused() {
        assert!(matches!(
            TreeImage::decode(b"something else"),
            Err(RunError::NotAProcessCheckpoint { .. })
        ));
        assert!(matches!(
            TreeImage::decode(b""),
            Err(RunError::NoCheckpoint)
        ));
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(br#"{"version": 99}"#);
        assert!(matches!(
            TreeImage::decode(&b),
            Err(RunError::Version { found: 99, .. })
        ));
    }
}
