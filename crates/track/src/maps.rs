//! Reading `/proc/PID/maps` to explain registration failures and to validate mprotect ranges.

use crate::PageRange;

/// What `covered` requires of every mapping.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Mapped, whatever its protection (async write-protect tracks any mapping).
    Mapped,
    /// Readable and writable.
    ReadWrite,
}

/// Whether `r` is entirely covered by contiguous mappings of process `pid` that satisfy `need`.
pub(crate) fn covered(pid: i32, r: PageRange, need: Need) -> std::io::Result<bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mut cur = r.start;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(span), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((a, b)) = span.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        if b <= cur {
            continue;
        }
        if a > cur {
            return Ok(false);
        }
        let p = perms.as_bytes();
        if need == Need::ReadWrite && (p.first() != Some(&b'r') || p.get(1) != Some(&b'w')) {
            return Ok(false);
        }
        cur = b;
        if cur >= r.end {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Vma {
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// `rwxs`/`rwxp` as printed.
    pub(crate) perms: [u8; 4],
    /// The path column ("" for anonymous memory).
    pub(crate) path: String,
}

impl Vma {
    pub(crate) fn shared(&self) -> bool {
        self.perms[3] == b's'
    }

    /// The protection as `PROT_*` bits.
    pub(crate) fn prot(&self) -> libc::c_int {
        let mut p = libc::PROT_NONE;
        if self.perms[0] == b'r' {
            p |= libc::PROT_READ;
        }
        if self.perms[1] == b'w' {
            p |= libc::PROT_WRITE;
        }
        if self.perms[2] == b'x' {
            p |= libc::PROT_EXEC;
        }
        p
    }
}

/// The mappings of process `pid` that overlap `r`, in address order; `None` when `r` is not
/// entirely covered by contiguous mappings.
pub(crate) fn vmas(pid: i32, r: PageRange) -> std::io::Result<Option<Vec<Vma>>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(parse_vmas(&text, r))
}

pub(crate) fn parse_vmas(text: &str, r: PageRange) -> Option<Vec<Vma>> {
    let mut out = Vec::new();
    let mut cur = r.start;
    for line in text.lines() {
        let mut fields = line.splitn(6, ' ');
        let (Some(span), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((a, b)) = span.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        if b <= cur {
            continue;
        }
        if a > cur {
            return None;
        }
        let p = perms.as_bytes();
        if p.len() != 4 {
            return None;
        }
        // offset, dev, inode, then the path after padding.
        let path = fields.nth(3).unwrap_or("").trim_start().to_string();
        out.push(Vma {
            start: a,
            end: b,
            perms: [p[0], p[1], p[2], p[3]],
            path,
        });
        cur = b;
        if cur >= r.end {
            return Some(out);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_mappings_of_a_range() {
        let text = "\
00400000-00403000 r-xp 00000000 08:01 28588786                           /usr/bin/x
7f0000000000-7f0000200000 rw-s 00000000 00:01 1234                       /memfd:arena (deleted)
7f0000200000-7f0000400000 rw-p 00000000 00:00 0 
7f0000500000-7f0000600000 rw-p 00000000 00:00 0 
";
        let v = parse_vmas(text, PageRange::new(0x7f0000100000, 0x7f0000300000)).unwrap();
        assert_eq!(v.len(), 2);
        assert!(v[0].shared() && !v[1].shared());
        assert_eq!(v[0].path, "/memfd:arena (deleted)");
        assert_eq!(v[1].path, "");
        assert_eq!(v[1].prot(), libc::PROT_READ | libc::PROT_WRITE);
        // A hole between 0x7f0000400000 and 0x7f0000500000.
        assert!(parse_vmas(text, PageRange::new(0x7f0000300000, 0x7f0000501000)).is_none());
        assert!(parse_vmas(text, PageRange::new(0x7f0000600000, 0x7f0000601000)).is_none());
    }
}
