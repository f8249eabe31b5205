//! `/proc/PID/maps` as typed entries.

use std::path::PathBuf;

use crate::error::{ProcError, Result};

/// What a mapping maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// Anonymous memory without a name.
    Anonymous,
    /// A file; `deleted` when the kernel marks it ` (deleted)`.
    File {
        /// The path as the kernel prints it (newlines appear as `\012`).
        path: PathBuf,
        /// The file was unlinked.
        deleted: bool,
    },
    /// `[heap]`.
    Heap,
    /// `[stack]` (the main thread's).
    Stack,
    /// `[vdso]`.
    Vdso,
    /// `[vvar]` and its variants (`[vvar_vclock]`).
    Vvar,
    /// `[vsyscall]`.
    Vsyscall,
    /// Any other bracketed name, e.g. `[anon:name]`, `[uprobes]`.
    Special(String),
}

/// Permissions of a mapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Perms {
    /// `r`.
    pub read: bool,
    /// `w`.
    pub write: bool,
    /// `x`.
    pub exec: bool,
    /// `s` (shared) rather than `p` (private).
    pub shared: bool,
}

/// One line of /proc/PID/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// Permissions.
    pub perms: Perms,
    /// Offset in the file (0 for anonymous memory).
    pub offset: u64,
    /// Device major and minor.
    pub dev: (u32, u32),
    /// Inode (0 for anonymous memory).
    pub inode: u64,
    /// What is mapped.
    pub kind: MapKind,
}

impl MapEntry {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the mapping is empty (never, for the kernel's output).
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Whether `addr` lies inside.
    pub fn contains(&self, addr: usize) -> bool {
        self.start <= addr && addr < self.end
    }

    /// The file path, for file mappings.
    pub fn path(&self) -> Option<&std::path::Path> {
        match &self.kind {
            MapKind::File { path, .. } => Some(path),
            _ => None,
        }
    }
}

/// Parses one line.
pub fn parse_line(line: &str) -> Result<MapEntry> {
    let bad = || ProcError::MapsFormat {
        line: line.to_string(),
    };
    let mut rest = line;
    let mut field = || -> Result<&str> {
        let t = rest.trim_start_matches(' ');
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        if f.is_empty() {
            Err(bad())
        } else {
            Ok(f)
        }
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    let (s, e) = range.split_once('-').ok_or_else(bad)?;
    let start = usize::from_str_radix(s, 16).map_err(|_| bad())?;
    let end = usize::from_str_radix(e, 16).map_err(|_| bad())?;
    let p = perms.as_bytes();
    if p.len() != 4 {
        return Err(bad());
    }
    let perms = Perms {
        read: p[0] == b'r',
        write: p[1] == b'w',
        exec: p[2] == b'x',
        shared: p[3] == b's',
    };
    let offset = u64::from_str_radix(offset, 16).map_err(|_| bad())?;
    let (ma, mi) = dev.split_once(':').ok_or_else(bad)?;
    let dev = (
        u32::from_str_radix(ma, 16).map_err(|_| bad())?,
        u32::from_str_radix(mi, 16).map_err(|_| bad())?,
    );
    let inode = inode.parse::<u64>().map_err(|_| bad())?;
    let name = rest.trim_start_matches(' ');
    let kind = if name.is_empty() {
        MapKind::Anonymous
    } else if name.starts_with('[') && name.ends_with(']') {
        match name {
            "[heap]" => MapKind::Heap,
            "[stack]" => MapKind::Stack,
            "[vdso]" => MapKind::Vdso,
            "[vsyscall]" => MapKind::Vsyscall,
            n if n.starts_with("[vvar") => MapKind::Vvar,
            n => MapKind::Special(n.to_string()),
        }
    } else {
        let (path, deleted) = match name.strip_suffix(" (deleted)") {
            Some(p) => (p, true),
            None => (name, false),
        };
        MapKind::File {
            path: PathBuf::from(path),
            deleted,
        }
    };
    Ok(MapEntry {
        start,
        end,
        perms,
        offset,
        dev,
        inode,
        kind,
    })
}

/// Parses the whole text of a maps file.
pub fn parse_maps(text: &str) -> Result<Vec<MapEntry>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(parse_line)
        .collect()
}

/// Reads and parses /proc/PID/maps.
pub fn read_maps(pid: i32) -> Result<Vec<MapEntry>> {
    let path = format!("/proc/{pid}/maps");
    let text = crate::sys::read_small(&path).map_err(|source| ProcError::Proc { path, source })?;
    parse_maps(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind() {
        let text = "\
55d0c8a00000-55d0c8a02000 r--p 00000000 fd:01 1835028                    /usr/bin/cat
55d0c8c21000-55d0c8c42000 rw-p 00000000 00:00 0                          [heap]
7f1c2a000000-7f1c2a021000 rw-s 00001000 00:19 42                         /dev/shm/my pool (deleted)
7f1c2a100000-7f1c2a200000 ---p 00000000 00:00 0 
7ffd5b9e0000-7ffd5ba01000 rw-p 00000000 00:00 0                          [stack]
7ffd5bbf2000-7ffd5bbf6000 r--p 00000000 00:00 0                          [vvar]
7ffd5bbf6000-7ffd5bbf8000 r-xp 00000000 00:00 0                          [vdso]
7ffd5bbf8000-7ffd5bbf9000 r--p 00000000 00:00 0                          [vvar_vclock]
7f1c2a300000-7f1c2a301000 rw-p 00000000 00:00 0                          [anon:tag]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";
        let m = parse_maps(text).unwrap();
        assert_eq!(m.len(), 10);
        assert_eq!(m[0].start, 0x55d0c8a00000);
        assert_eq!(m[0].len(), 0x2000);
        assert_eq!(m[0].dev, (0xfd, 1));
        assert_eq!(m[0].inode, 1835028);
        assert_eq!(m[0].path().unwrap(), std::path::Path::new("/usr/bin/cat"));
        assert!(m[0].perms.read && !m[0].perms.write && !m[0].perms.shared);
        assert_eq!(m[1].kind, MapKind::Heap);
        assert_eq!(
            m[2].kind,
            MapKind::File {
                path: "/dev/shm/my pool".into(),
                deleted: true
            }
        );
        assert!(m[2].perms.shared && m[2].perms.write);
        assert_eq!(m[2].offset, 0x1000);
        assert_eq!(m[3].kind, MapKind::Anonymous);
        assert!(!m[3].perms.read);
        assert_eq!(m[4].kind, MapKind::Stack);
        assert_eq!(m[5].kind, MapKind::Vvar);
        assert_eq!(m[6].kind, MapKind::Vdso);
        assert!(m[6].perms.exec);
        assert_eq!(m[7].kind, MapKind::Vvar);
        assert_eq!(m[8].kind, MapKind::Special("[anon:tag]".into()));
        assert_eq!(m[9].kind, MapKind::Vsyscall);
        assert_eq!(m[9].end, 0xffffffffff601000);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_line("hello").is_err());
        assert!(parse_line("1000-2000 rw-p 0 fd:01").is_err());
        assert!(parse_line("zz-2000 rw-p 0 fd:01 0").is_err());
    }

    #[test]
    fn own_maps() {
        let m = read_maps(std::process::id() as i32).unwrap();
        assert!(m.iter().any(|e| e.kind == MapKind::Stack));
        let here = own_maps as *const () as usize;
        let e = m.iter().find(|e| e.contains(here)).unwrap();
        assert!(e.perms.exec);
    }
}
