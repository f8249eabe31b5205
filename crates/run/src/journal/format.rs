//! The journal's bytes in the pool, as pure encode/decode functions on byte slices (fuzzable:
//! every decoder takes `&[u8]` and returns a typed problem, never panics).
//!
//! * The **head** (section `run.journal`, two pages): a checksummed fixed part written once,
//!   then control words each changed with one aligned 8-byte store (failure-atomic on every
//!   medium), the reason of an incomplete journal, and the list of stash directories.
//! * **Segments** (sections `run.journal.<n>`, all of one length): a 64-byte checksummed header
//!   naming the first sequence number, then records back to back.
//! * **Records**: `crc | len | seq | tag | kind | payload`, 8-byte aligned. A record is valid when
//!   its CRC-32C matches and its sequence number is the one expected at that place; the first
//!   record that is not ends the segment (a torn tail, or bytes of an earlier use).
//!
//! `docs/journal.md` gives the tables.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const HEAD_MAGIC: &[u8; 8] = b"KIOKUJNL";
pub const SEGMENT_MAGIC: &[u8; 8] = b"KIOKUJSG";
pub const VERSION: u32 = 1;

/// Length of the head section.
pub const HEAD_LEN: u64 = 8192;
/// Offsets of the head's control words (each an aligned u64).
pub const W_LIVE_FROM_SEQ: u64 = 64;
pub const W_DEAD_BELOW_TAG: u64 = 72;
/// 0: complete; otherwise 1 + the tag from which records may be missing.
pub const W_INCOMPLETE: u64 = 80;
pub const W_REASON_LEN: u64 = 88;
pub const W_STASH_DIRS: u64 = 96;
/// 0: no restore in progress; otherwise 1 + the epoch being restored.
pub const W_APPLY_EPOCH: u64 = 104;
/// The sequence number of the next record a restore in progress undoes (0: all done).
pub const W_APPLY_NEXT: u64 = 112;
pub const REASON_OFF: u64 = 128;
pub const REASON_MAX: usize = 768;
pub const STASH_OFF: u64 = 1024;
pub const STASH_ENTRY_LEN: usize = 256;
pub const STASH_MAX: usize = ((HEAD_LEN - STASH_OFF) as usize) / STASH_ENTRY_LEN;
/// Longest stash directory path (entry: u32 length, u32 CRC, bytes).
pub const STASH_PATH_MAX: usize = STASH_ENTRY_LEN - 8;

pub const SEGMENT_HEADER_LEN: u64 = 64;
pub const RECORD_HEADER_LEN: usize = 32;

/// The fixed part of the head (bytes 0..64).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadInfo {
    pub segment_len: u64,
    pub created_ns: u64,
}

/// Why bytes are not what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatProblem {
    #[error("too short ({len} bytes, {needed} needed)")]
    Short { len: usize, needed: usize },
    #[error("bad magic")]
    Magic,
    #[error("version {0} (this kioku reads {VERSION})")]
    Version(u32),
    #[error("checksum mismatch")]
    Checksum,
    #[error("invalid field: {0}")]
    Invalid(&'static str),
    #[error("sequence number {found}, expected {expected}")]
    Sequence { found: u64, expected: u64 },
}

fn crc(b: &[u8]) -> u32 {
    crc32c::crc32c(b)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

fn need(b: &[u8], n: usize) -> Result<(), FormatProblem> {
    if b.len() < n {
        return Err(FormatProblem::Short {
            len: b.len(),
            needed: n,
        });
    }
    Ok(())
}

impl HeadInfo {
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(HEAD_MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.segment_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.created_ns.to_le_bytes());
        let c = crc(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<HeadInfo, FormatProblem> {
        need(b, 64)?;
        if &b[0..8] != HEAD_MAGIC {
            return Err(FormatProblem::Magic);
        }
        let v = u32_at(b, 8);
        if v != VERSION {
            return Err(FormatProblem::Version(v));
        }
        if crc(&b[..60]) != u32_at(b, 60) {
            return Err(FormatProblem::Checksum);
        }
        let segment_len = u64_at(b, 16);
        if segment_len < 4096 || !segment_len.is_multiple_of(4096) {
            return Err(FormatProblem::Invalid("segment length"));
        }
        Ok(HeadInfo {
            segment_len,
            created_ns: u64_at(b, 24),
        })
    }
}

/// One stash directory entry of the head.
pub fn encode_stash_entry(path: &Path) -> Option<[u8; STASH_ENTRY_LEN]> {
    let p = path.as_os_str().as_bytes();
    if p.is_empty() || p.len() > STASH_PATH_MAX {
        return None;
    }
    let mut b = [0u8; STASH_ENTRY_LEN];
    b[0..4].copy_from_slice(&(p.len() as u32).to_le_bytes());
    b[4..8].copy_from_slice(&crc(p).to_le_bytes());
    b[8..8 + p.len()].copy_from_slice(p);
    Some(b)
}

pub fn decode_stash_entry(b: &[u8]) -> Result<PathBuf, FormatProblem> {
    need(b, 8)?;
    let len = u32_at(b, 0) as usize;
    if len == 0 || len > STASH_PATH_MAX {
        return Err(FormatProblem::Invalid("stash path length"));
    }
    need(b, 8 + len)?;
    let p = &b[8..8 + len];
    if crc(p) != u32_at(b, 4) {
        return Err(FormatProblem::Checksum);
    }
    Ok(PathBuf::from(OsStr::from_bytes(p)))
}

/// A segment's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The `n` of its section name `run.journal.<n>`.
    pub index: u32,
    /// Sequence number of its first record.
    pub first_seq: u64,
    /// Length of the segment (its section).
    pub len: u64,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN as usize] {
        let mut b = [0u8; SEGMENT_HEADER_LEN as usize];
        b[0..8].copy_from_slice(SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.index.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        let c = crc(&b[..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<SegmentHeader, FormatProblem> {
        need(b, SEGMENT_HEADER_LEN as usize)?;
        if &b[0..8] != SEGMENT_MAGIC {
            return Err(FormatProblem::Magic);
        }
        let v = u32_at(b, 8);
        if v != VERSION {
            return Err(FormatProblem::Version(v));
        }
        if crc(&b[..60]) != u32_at(b, 60) {
            return Err(FormatProblem::Checksum);
        }
        Ok(SegmentHeader {
            index: u32_at(b, 12),
            first_seq: u64_at(b, 16),
            len: u64_at(b, 24),
        })
    }
}

/// Kinds of records (u16 on the pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Kind {
    FileBase = 1,
    PreImage = 2,
    Created = 3,
    Unlinked = 4,
    UnlinkedCopy = 5,
    CopyData = 6,
    Rmdir = 7,
    Renamed = 8,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Kind> {
        Some(match v {
            1 => Kind::FileBase,
            2 => Kind::PreImage,
            3 => Kind::Created,
            4 => Kind::Unlinked,
            5 => Kind::UnlinkedCopy,
            6 => Kind::CopyData,
            7 => Kind::Rmdir,
            8 => Kind::Renamed,
            _ => return None,
        })
    }

    /// Whether undoing it changes names (the steps a restore in progress marks).
    pub fn is_name(self) -> bool {
        matches!(
            self,
            Kind::Created | Kind::Unlinked | Kind::UnlinkedCopy | Kind::Rmdir | Kind::Renamed
        )
    }
}

/// A file's identity: device and inode number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
}

/// Time as seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// A file's attributes that a restore puts back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Attrs {
    pub size: u64,
    pub mtime: Time,
    /// st_mode (type and permission bits).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// What created a name (and so how a restore removes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Created {
    /// A regular file (open with O_CREAT), a device node, fifo or socket (mknod), a symlink,
    /// or a second name of an existing inode (link): removed with unlink.
    NonDir = 1,
    /// mkdir: removed with rmdir.
    Dir = 2,
}

/// One undo record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The first change of a file in an epoch: its size, mtime, mode and owner at the
    /// checkpoint. Undo: truncate or extend to the size, put the attributes back.
    FileBase {
        key: FileKey,
        path: PathBuf,
        attrs: Attrs,
    },
    /// Bytes of a file at the checkpoint that a change overwrites. Undo: write them back.
    PreImage {
        key: FileKey,
        path: PathBuf,
        offset: u64,
        data: Vec<u8>,
    },
    /// A name that did not exist at the checkpoint. Undo: remove it.
    Created { kind: Created, path: PathBuf },
    /// A name removed (unlink, or replaced by rename) whose inode was hard-linked into the
    /// stash first. Undo: link it back.
    Unlinked {
        key: FileKey,
        path: PathBuf,
        stash: PathBuf,
    },
    /// A name removed whose inode could not be linked into a stash: its attributes (and, for
    /// a symlink, its target; for a node, its device number) here, its bytes in the
    /// `CopyData` records that follow. Undo: recreate it.
    UnlinkedCopy {
        key: FileKey,
        path: PathBuf,
        attrs: Attrs,
        rdev: u64,
        link_target: Option<PathBuf>,
    },
    /// Bytes of the file of the `UnlinkedCopy` record with sequence number `owner`.
    CopyData {
        owner: u64,
        offset: u64,
        data: Vec<u8>,
    },
    /// A directory removed. Undo: create it again (empty: its entries' own records refill it).
    Rmdir { path: PathBuf, attrs: Attrs },
    /// A rename (`exchange`: RENAME_EXCHANGE). `from_key` is the inode that was at `from`,
    /// `to_key` the one at `to` for an exchange. Undo: rename (exchange) back.
    Renamed {
        from: PathBuf,
        to: PathBuf,
        from_key: FileKey,
        to_key: Option<FileKey>,
        exchange: bool,
    },
}

impl Record {
    pub fn kind(&self) -> Kind {
        match self {
            Record::FileBase { .. } => Kind::FileBase,
            Record::PreImage { .. } => Kind::PreImage,
            Record::Created { .. } => Kind::Created,
            Record::Unlinked { .. } => Kind::Unlinked,
            Record::UnlinkedCopy { .. } => Kind::UnlinkedCopy,
            Record::CopyData { .. } => Kind::CopyData,
            Record::Rmdir { .. } => Kind::Rmdir,
            Record::Renamed { .. } => Kind::Renamed,
        }
    }

    /// The payload bytes.
    pub fn encode_payload(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Record::FileBase { key, path, attrs } => {
                w.key(key);
                w.attrs(attrs);
                w.path(path);
            }
            Record::PreImage {
                key,
                path,
                offset,
                data,
            } => {
                w.key(key);
                w.u64(*offset);
                w.path(path);
                w.bytes(data);
            }
            Record::Created { kind, path } => {
                w.u32(*kind as u32);
                w.path(path);
            }
            Record::Unlinked { key, path, stash } => {
                w.key(key);
                w.path(path);
                w.path(stash);
            }
            Record::UnlinkedCopy {
                key,
                path,
                attrs,
                rdev,
                link_target,
            } => {
                w.key(key);
                w.attrs(attrs);
                w.u64(*rdev);
                w.path(path);
                w.u32(link_target.is_some() as u32);
                w.path(link_target.as_deref().unwrap_or(Path::new("")));
            }
            Record::CopyData {
                owner,
                offset,
                data,
            } => {
                w.u64(*owner);
                w.u64(*offset);
                w.bytes(data);
            }
            Record::Rmdir { path, attrs } => {
                w.attrs(attrs);
                w.path(path);
            }
            Record::Renamed {
                from,
                to,
                from_key,
                to_key,
                exchange,
            } => {
                w.u32(*exchange as u32);
                w.u32(to_key.is_some() as u32);
                w.key(from_key);
                w.key(&to_key.unwrap_or(FileKey { dev: 0, ino: 0 }));
                w.path(from);
                w.path(to);
            }
        }
        w.0
    }

    pub fn decode_payload(kind: Kind, p: &[u8]) -> Result<Record, FormatProblem> {
        let mut r = Reader { b: p, at: 0 };
        let rec = match kind {
            Kind::FileBase => {
                let key = r.key()?;
                let attrs = r.attrs()?;
                Record::FileBase {
                    key,
                    attrs,
                    path: r.path()?,
                }
            }
            Kind::PreImage => {
                let key = r.key()?;
                let offset = r.u64()?;
                let path = r.path()?;
                Record::PreImage {
                    key,
                    path,
                    offset,
                    data: r.bytes()?,
                }
            }
            Kind::Created => {
                let kind = match r.u32()? {
                    1 => Created::NonDir,
                    2 => Created::Dir,
                    _ => return Err(FormatProblem::Invalid("created kind")),
                };
                Record::Created {
                    kind,
                    path: r.path()?,
                }
            }
            Kind::Unlinked => {
                let key = r.key()?;
                let path = r.path()?;
                Record::Unlinked {
                    key,
                    path,
                    stash: r.path()?,
                }
            }
            Kind::UnlinkedCopy => {
                let key = r.key()?;
                let attrs = r.attrs()?;
                let rdev = r.u64()?;
                let path = r.path()?;
                let has = r.u32()?;
                let target = r.path()?;
                Record::UnlinkedCopy {
                    key,
                    path,
                    attrs,
                    rdev,
                    link_target: (has != 0).then_some(target),
                }
            }
            Kind::CopyData => {
                let owner = r.u64()?;
                let offset = r.u64()?;
                Record::CopyData {
                    owner,
                    offset,
                    data: r.bytes()?,
                }
            }
            Kind::Rmdir => {
                let attrs = r.attrs()?;
                Record::Rmdir {
                    attrs,
                    path: r.path()?,
                }
            }
            Kind::Renamed => {
                let exchange = r.u32()? != 0;
                let has_to = r.u32()? != 0;
                let from_key = r.key()?;
                let to_key = r.key()?;
                let from = r.path()?;
                Record::Renamed {
                    from,
                    to: r.path()?,
                    from_key,
                    to_key: has_to.then_some(to_key),
                    exchange,
                }
            }
        };
        if r.at != p.len() {
            return Err(FormatProblem::Invalid("trailing bytes in a record"));
        }
        Ok(rec)
    }
}

/// A record's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub seq: u64,
    pub tag: u64,
    pub kind: Kind,
    /// Total length on the pool (header, payload, padding).
    pub len: u32,
}

/// Bytes on the pool of a record with this payload length.
pub fn record_len(payload_len: usize) -> usize {
    (RECORD_HEADER_LEN + payload_len).div_ceil(8) * 8
}

/// A whole record: header, payload, zero padding; CRC over everything after the CRC field.
pub fn encode_record(seq: u64, tag: u64, rec: &Record) -> Vec<u8> {
    let payload = rec.encode_payload();
    let len = record_len(payload.len());
    let mut b = vec![0u8; len];
    b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..24].copy_from_slice(&tag.to_le_bytes());
    b[24..26].copy_from_slice(&(rec.kind() as u16).to_le_bytes());
    b[28..32].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b[32..32 + payload.len()].copy_from_slice(&payload);
    let c = crc(&b[4..]);
    b[0..4].copy_from_slice(&c.to_le_bytes());
    b
}

/// Reads the record at the start of `b` (the rest of a segment), which must carry sequence
/// number `expected`. Returns the header and the payload.
pub fn decode_record(b: &[u8], expected: u64) -> Result<(RecordHeader, &[u8]), FormatProblem> {
    need(b, RECORD_HEADER_LEN)?;
    let len = u32_at(b, 4) as usize;
    if len < RECORD_HEADER_LEN || !len.is_multiple_of(8) {
        return Err(FormatProblem::Invalid("record length"));
    }
    need(b, len)?;
    if crc(&b[4..len]) != u32_at(b, 0) {
        return Err(FormatProblem::Checksum);
    }
    let seq = u64_at(b, 8);
    if seq != expected {
        return Err(FormatProblem::Sequence {
            found: seq,
            expected,
        });
    }
    let kind = Kind::from_u16(u16::from_le_bytes([b[24], b[25]]))
        .ok_or(FormatProblem::Invalid("record kind"))?;
    if b[26] != 0 || b[27] != 0 {
        return Err(FormatProblem::Invalid("reserved bytes"));
    }
    let plen = u32_at(b, 28) as usize;
    if record_len(plen) != len {
        return Err(FormatProblem::Invalid("payload length"));
    }
    Ok((
        RecordHeader {
            seq,
            tag: u64_at(b, 16),
            kind,
            len: len as u32,
        },
        &b[RECORD_HEADER_LEN..RECORD_HEADER_LEN + plen],
    ))
}

/// The records of one segment's body (`body` = the segment after its header), from sequence
/// number `first_seq` on, up to the first record that is not valid. Returns each record's
/// header and offset in `body`, and the offset where the next record would go.
pub fn scan_segment(body: &[u8], first_seq: u64) -> (Vec<(RecordHeader, usize)>, usize) {
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut seq = first_seq;
    while at < body.len() {
        match decode_record(&body[at..], seq) {
            Ok((h, _)) => {
                out.push((h, at));
                at += h.len as usize;
                seq += 1;
            }
            Err(_) => break,
        }
    }
    (out, at)
}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn key(&mut self, k: &FileKey) {
        self.u64(k.dev);
        self.u64(k.ino);
    }
    fn attrs(&mut self, a: &Attrs) {
        self.u64(a.size);
        self.u64(a.mtime.sec as u64);
        self.u32(a.mtime.nsec);
        self.u32(a.mode);
        self.u32(a.uid);
        self.u32(a.gid);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn path(&mut self, p: &Path) {
        self.bytes(p.as_os_str().as_bytes());
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], FormatProblem> {
        if self.b.len() - self.at < n {
            return Err(FormatProblem::Invalid("record payload too short"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, FormatProblem> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, FormatProblem> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn key(&mut self) -> Result<FileKey, FormatProblem> {
        Ok(FileKey {
            dev: self.u64()?,
            ino: self.u64()?,
        })
    }
    fn attrs(&mut self) -> Result<Attrs, FormatProblem> {
        let size = self.u64()?;
        let sec = self.u64()? as i64;
        let nsec = self.u32()?;
        if nsec >= 1_000_000_000 {
            return Err(FormatProblem::Invalid("nanoseconds"));
        }
        Ok(Attrs {
            size,
            mtime: Time { sec, nsec },
            mode: self.u32()?,
            uid: self.u32()?,
            gid: self.u32()?,
        })
    }
    fn bytes(&mut self) -> Result<Vec<u8>, FormatProblem> {
        let n = self.u64()?;
        if n > (self.b.len() - self.at) as u64 {
            return Err(FormatProblem::Invalid("byte string length"));
        }
        Ok(self.take(n as usize)?.to_vec())
    }
    fn path(&mut self) -> Result<PathBuf, FormatProblem> {
        let b = self.bytes()?;
        if b.contains(&0) {
            return Err(FormatProblem::Invalid("NUL in a path"));
        }
        Ok(PathBuf::from(OsStr::from_bytes(&b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Record> {
        let key = FileKey { dev: 42, ino: 7 };
        let attrs = Attrs {
            size: 1234,
            mtime: Time {
                sec: 1_700_000_000,
                nsec: 999_999_999,
            },
            mode: 0o100644,
            uid: 1000,
            gid: 100,
        };
        vec![
            Record::FileBase {
                key,
                path: "/a/b".into(),
                attrs,
            },
            Record::PreImage {
                key,
                path: "/a/b".into(),
                offset: 4096,
                data: vec![1, 2, 3],
            },
            Record::Created {
                kind: Created::Dir,
                path: "/d".into(),
            },
            Record::Unlinked {
                key,
                path: "/x".into(),
                stash: "/s/1".into(),
            },
            Record::UnlinkedCopy {
                key,
                path: "/l".into(),
                attrs,
                rdev: 5,
                link_target: Some("target".into()),
            },
            Record::CopyData {
                owner: 9,
                offset: 0,
                data: vec![0; 17],
            },
            Record::Rmdir {
                path: "/d".into(),
                attrs,
            },
            Record::Renamed {
                from: "/f".into(),
                to: "/t".into(),
                from_key: key,
                to_key: Some(FileKey { dev: 42, ino: 8 }),
                exchange: true,
            },
        ]
    }

    #[test]
    fn records_round_trip() {
        for (i, r) in samples().into_iter().enumerate() {
            let b = encode_record(10 + i as u64, 3, &r);
            assert_eq!(b.len() % 8, 0);
            let (h, p) = decode_record(&b, 10 + i as u64).unwrap();
            assert_eq!(
                (h.seq, h.tag, h.kind, h.len as usize),
                (10 + i as u64, 3, r.kind(), b.len())
            );
            assert_eq!(Record::decode_payload(h.kind, p).unwrap(), r);
        }
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let b = encode_record(5, 1, &samples()[1]);
        for bit in 0..b.len() * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_record(&c, 5).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn wrong_sequence_number_ends_the_segment() {
        let b = encode_record(5, 1, &samples()[0]);
        assert_eq!(
            decode_record(&b, 6).unwrap_err(),
            FormatProblem::Sequence {
                found: 5,
                expected: 6
            }
        );
    }

    #[test]
    fn scan_stops_at_torn_tail_and_gaps() {
        let recs = samples();
        let mut body = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            body.extend(encode_record(100 + i as u64, 0, r));
        }
        let full = body.len();
        body.resize(full + 256, 0);
        let (found, end) = scan_segment(&body, 100);
        assert_eq!(found.len(), recs.len());
        assert_eq!(end, full);
        // Torn: the last record's final byte changed.
        let last = found.last().unwrap().1;
        let mut torn = body.clone();
        torn[full - 1] ^= 0xff;
        let (found2, end2) = scan_segment(&torn, 100);
        assert_eq!(found2.len(), recs.len() - 1);
        assert_eq!(end2, last);
        // A gap (a record missing in the middle): everything after it is ignored.
        let mut gap = Vec::new();
        gap.extend(encode_record(100, 0, &recs[0]));
        gap.extend(encode_record(102, 0, &recs[2]));
        assert_eq!(scan_segment(&gap, 100).0.len(), 1);
        // Bytes of an earlier use of the segment (lower sequence numbers) are not records.
        let (none, at) = scan_segment(&body, 200);
        assert!(none.is_empty());
        assert_eq!(at, 0);
    }

    #[test]
    fn heads_and_segment_headers_round_trip_and_reject_damage() {
        let h = HeadInfo {
            segment_len: 1 << 20,
            created_ns: 77,
        };
        let b = h.encode();
        assert_eq!(HeadInfo::decode(&b).unwrap(), h);
        let mut c = b;
        c[20] ^= 1;
        assert_eq!(HeadInfo::decode(&c), Err(FormatProblem::Checksum));
        let s = SegmentHeader {
            index: 3,
            first_seq: 99,
            len: 1 << 20,
        };
        let sb = s.encode();
        assert_eq!(SegmentHeader::decode(&sb).unwrap(), s);
        assert_eq!(SegmentHeader::decode(&[0u8; 64]), Err(FormatProblem::Magic));
        let e = encode_stash_entry(Path::new("/mnt/.kioku-stash/x")).unwrap();
        assert_eq!(
            decode_stash_entry(&e).unwrap(),
            Path::new("/mnt/.kioku-stash/x")
        );
        assert!(decode_stash_entry(&[0u8; STASH_ENTRY_LEN]).is_err());
    }

    /// The decoders never panic, whatever the bytes (a cheap stand-in for a fuzzer run; the
    /// same functions are the fuzz targets).
    #[test]
    fn decoders_survive_garbage() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let valid: Vec<Vec<u8>> = samples().iter().map(|r| encode_record(1, 1, r)).collect();
        for i in 0..20_000 {
            let mut b = valid[i % valid.len()].clone();
            let n = rng.gen_range(1..4);
            for _ in 0..n {
                let at = rng.gen_range(0..b.len());
                b[at] = rng.gen();
            }
            if rng.gen_bool(0.2) {
                b.truncate(rng.gen_range(0..b.len()));
            }
            if let Ok((h, p)) = decode_record(&b, 1) {
                let _ = Record::decode_payload(h.kind, p);
            }
            // Payload decoders on raw garbage (checksums bypassed).
            for k in 1..=8u16 {
                let _ = Record::decode_payload(Kind::from_u16(k).unwrap(), &b);
            }
            let _ = scan_segment(&b, 1);
            let _ = SegmentHeader::decode(&b);
            let _ = HeadInfo::decode(&b);
            let _ = decode_stash_entry(&b);
        }
    }
}
