//! Transparent huge pages and shared mappings (memfd, tmpfs file, file on the root filesystem).

mod common;

use std::os::fd::AsRawFd;

use common::*;
use kioku_track::{page_size, BackendKind, PageTracker};

const HUGE: usize = 2 << 20;

/// kB of AnonHugePages backing `[addr, addr+len)` according to /proc/self/smaps.
fn anon_huge_kb(addr: usize, len: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let mut kb = 0;
    for line in smaps.lines() {
        if let Some((span, _)) = line.split_once(' ') {
            if let Some((a, b)) = span.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a < addr + len && addr < b;
                    continue;
                }
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix("AnonHugePages:") {
                kb += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
        }
    }
    kb
}

fn thp_mapping(populate_before_tracking: bool) -> Mapping {
    let m = Mapping::anon(4 * HUGE, HUGE, false);
    // SAFETY: advising our own mapping.
    let rc = unsafe { libc::madvise(m.addr as *mut libc::c_void, m.len, libc::MADV_HUGEPAGE) };
    assert_eq!(rc, 0, "madvise(MADV_HUGEPAGE)");
    if populate_before_tracking {
        for i in 0..m.pages() {
            m.write(i, 1);
        }
    }
    m
}

#[test]
fn huge_pages_every_written_page_is_reported() {
    for kind in self_backends() {
        for populate in [true, false] {
            let m = thp_mapping(populate);
            let huge_before = anon_huge_kb(m.addr, m.len);
            let mut t = tracker(kind);
            t.track(m.range()).unwrap();
            let written = [0usize, 1, 511, 512, 700, 1535, 2047];
            for &i in &written {
                m.write(i, 2);
            }
            let huge_after = anon_huge_kb(m.addr, m.len);
            let got = page_set(&t.scan().unwrap());
            let truth = expect_set(&m, written);
            assert!(
                truth.is_subset(&got),
                "{kind:?} populate={populate}: missed {:x?}",
                truth.difference(&got).collect::<Vec<_>>()
            );
            // Over-reporting is allowed only in whole huge pages that contain a written page.
            for p in got.difference(&truth) {
                let huge = p & !(HUGE - 1);
                assert!(
                    truth.iter().any(|w| w & !(HUGE - 1) == huge),
                    "{kind:?}: {p:#x} reported outside any written huge page"
                );
            }
            eprintln!(
                "{kind:?} populate_before_tracking={populate}: AnonHugePages {huge_before} kB \
                 before tracking, {huge_after} kB after writes; {} pages written, {} reported",
                truth.len(),
                got.len()
            );
            assert!(t.scan().unwrap().is_empty(), "{kind:?}");
            if populate && huge_before == 0 {
                eprintln!("!!!!! NOTE: no THP was formed (THP disabled?); tested 4 KiB pages only");
            }
        }
    }
}

fn shared_case(kind: BackendKind, what: &str, fd: &impl AsRawFd, pages: usize) {
    let ps = page_size();
    let m = Mapping::shared(fd, pages * ps);
    // Populate some pages through the mapping first.
    for i in (0..pages).step_by(3) {
        m.write(i, 1);
    }
    let mut t = tracker(kind);
    t.track(m.range()).unwrap();
    assert!(t.scan().unwrap().is_empty(), "{kind:?} {what}: not clean");
    let written = [0usize, 1, 2, 5, pages / 2, pages - 1];
    for &i in &written {
        m.write(i, 7);
    }
    for i in 10..20 {
        std::hint::black_box(m.read(i));
    }
    let got = page_set(&t.scan().unwrap());
    assert_eq!(got, expect_set(&m, written), "{kind:?} {what}");
    assert!(t.scan().unwrap().is_empty(), "{kind:?} {what}");
}

#[test]
fn memfd_shared_mapping() {
    for kind in self_backends() {
        let fd = memfd(256 * page_size());
        shared_case(kind, "memfd", &fd, 256);
    }
}

fn fs_type(path: &std::path::Path) -> String {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: statfs into a zeroed struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-pointer.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    match st.f_type {
        0xEF53 => "ext4".into(),
        0x0102_1994 => "tmpfs".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        other => format!("fs {other:#x}"),
    }
}

fn file_case(dir: &std::path::Path) {
    let ty = fs_type(dir);
    for kind in self_backends() {
        let f = tempfile::tempfile_in(dir).unwrap();
        f.set_len(128 * page_size() as u64).unwrap();
        eprintln!("{kind:?}: MAP_SHARED file on {ty} ({})", dir.display());
        shared_case(kind, &ty, &f, 128);
    }
}

#[test]
fn tmpfs_file_shared_mapping() {
    let dir = std::path::Path::new("/dev/shm");
    if !dir.is_dir() {
        eprintln!("!!!!! SKIPPING tmpfs_file_shared_mapping: /dev/shm missing !!!!!");
        return;
    }
    file_case(dir);
}

#[test]
fn disk_file_shared_mapping() {
    // The crate's own target directory lives on the build machine's disk filesystem.
    let dir = std::env::temp_dir();
    file_case(&dir);
}
