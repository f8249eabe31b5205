//! What `/proc/PID/smaps` says about huge pages in a range: the kernel's own accounting, which
//! the tests and `kioku hot` show next to kioku's view.

use kioku_track::PageRange;

use crate::HugeError;

/// Huge-page accounting of the mappings that overlap a range, in KiB (whole mappings are
/// counted: smaps has no finer grain).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmapsHuge {
    /// Resident memory.
    pub rss_kib: u64,
    /// Anonymous memory in transparent huge pages.
    pub anon_huge_kib: u64,
    /// Shmem mapped with PMDs (huge pages).
    pub shmem_pmd_kib: u64,
    /// Other file memory mapped with PMDs.
    pub file_pmd_kib: u64,
    /// hugetlbfs memory (shared and private).
    pub hugetlb_kib: u64,
}

impl SmapsHuge {
    /// Huge-page-mapped memory of any kind.
    pub fn huge_kib(&self) -> u64 {
        self.anon_huge_kib + self.shmem_pmd_kib + self.file_pmd_kib + self.hugetlb_kib
    }
}

/// Reads smaps of process `pid` for the mappings overlapping `r`.
pub fn smaps_huge(pid: i32, r: PageRange) -> Result<SmapsHuge, HugeError> {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/smaps")).map_err(|source| HugeError::Sys {
            what: "reading /proc/PID/smaps",
            source,
        })?;
    Ok(parse(&text, r))
}

fn parse(text: &str, r: PageRange) -> SmapsHuge {
    let mut out = SmapsHuge::default();
    let mut inside = false;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = a < r.end && r.start < b;
                continue;
            }
        }
        if !inside {
            continue;
        }
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let kib: u64 = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match key {
            "Rss" => out.rss_kib += kib,
            "AnonHugePages" => out.anon_huge_kib += kib,
            "ShmemPmdMapped" => out.shmem_pmd_kib += kib,
            "FilePmdMapped" => out.file_pmd_kib += kib,
            "Shared_Hugetlb" | "Private_Hugetlb" => out.hugetlb_kib += kib,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_mappings_that_overlap() {
        let text = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Rss:                4096 kB
AnonHugePages:      2048 kB
ShmemPmdMapped:        0 kB
7f0000400000-7f0000600000 rw-s 00000000 00:01 7   /memfd:x (deleted)
Rss:                2048 kB
AnonHugePages:         0 kB
ShmemPmdMapped:     2048 kB
Private_Hugetlb:       0 kB
7f0000800000-7f0000a00000 rw-p 00000000 00:00 0
Rss:                2048 kB
AnonHugePages:      2048 kB
";
        let s = parse(text, PageRange::new(0x7f0000200000, 0x7f0000500000));
        assert_eq!(s.rss_kib, 6144);
        assert_eq!(s.anon_huge_kib, 2048);
        assert_eq!(s.shmem_pmd_kib, 2048);
        assert_eq!(s.huge_kib(), 4096);
    }
}
