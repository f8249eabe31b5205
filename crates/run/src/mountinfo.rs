//! This process's mount table (/proc/self/mountinfo): where a mount, known by its id or by
//! the device of a file system, is reachable by path.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// The mount id (statx's `stx_mnt_id`).
    pub id: u64,
    /// Device number of the file system.
    pub dev: u64,
    /// Whether the mount shows the file system's root (not a bind mount of a directory in it).
    pub whole: bool,
    /// Where it is mounted.
    pub point: PathBuf,
}

/// The mounts this process sees.
pub(crate) fn mounts() -> io::Result<Vec<Mount>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text.lines().filter_map(parse).collect())
}

/// `id parent major:minor root point ...`
fn parse(line: &str) -> Option<Mount> {
    let mut f = line.split(' ');
    let id = f.next()?.parse().ok()?;
    let _parent = f.next()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let root = f.next()?;
    let point = f.next()?;
    Some(Mount {
        id,
        dev: libc::makedev(major.parse().ok()?, minor.parse().ok()?),
        whole: root == "/",
        point: PathBuf::from(OsStr::from_bytes(&unescape(point))),
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b\134c"), b"/a b\\c");
        assert_eq!(unescape("/plain"), b"/plain");
    }

    #[test]
    fn a_line_gives_id_device_and_point() {
        let m =
            parse("36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw").unwrap();
        assert_eq!(m.id, 36);
        assert_eq!(m.dev, libc::makedev(98, 0));
        assert!(!m.whole);
        assert_eq!(m.point, PathBuf::from("/mnt/a b"));
        assert!(mounts()
            .unwrap()
            .iter()
            .any(|m| m.point == std::path::Path::new("/")));
    }
}
