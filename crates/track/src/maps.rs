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
