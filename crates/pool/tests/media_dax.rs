//! The `dax` medium without persistent memory: feature detection, refusal on filesystems without
//! MAP_SYNC, and the cache-line write-back and non-temporal copy routines on ordinary memory.

use std::fs::{File, OpenOptions};
use std::path::Path;

use kioku_pool::media::dax::{
    copy_nontemporal, flush_instruction, map_sync_supported, store_fence, write_back, DaxMedium,
    FlushInstruction,
};
use kioku_pool::media::{open_medium, MediumChoice, MediumError, MediumKind};

fn cpu_flags() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").expect("read /proc/cpuinfo");
    let line = info
        .lines()
        .find(|l| l.starts_with("flags"))
        .expect("a flags line in /proc/cpuinfo");
    line.split(':')
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The instructions this CPU can run, best first.
fn available_instructions() -> Vec<FlushInstruction> {
    let flags = cpu_flags();
    let has = |f: &str| flags.iter().any(|x| x == f);
    let mut found = Vec::new();
    if has("clwb") {
        found.push(FlushInstruction::Clwb);
    }
    if has("clflushopt") {
        found.push(FlushInstruction::Clflushopt);
    }
    found.push(FlushInstruction::Clflush);
    found
}

#[test]
fn detected_instruction_matches_proc_cpuinfo() {
    let expected = available_instructions()[0];
    assert_eq!(FlushInstruction::detect(), expected);
    assert_eq!(flush_instruction(), expected.name());
    // Detection is done once and stays the same.
    assert_eq!(FlushInstruction::detect(), FlushInstruction::detect());
}

fn create_file(path: &Path, len: u64) -> File {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap();
    file.set_len(len).unwrap();
    file
}

fn assert_refused(dir: &Path) {
    for len in [0, 8192] {
        let path = dir.join(format!("dax-{len}.pool"));
        let file = create_file(&path, len);
        assert!(!map_sync_supported(&file, &path).unwrap());
        let err = DaxMedium::open(file, &path).unwrap_err();
        assert!(matches!(err, MediumError::DaxUnsupported { .. }), "{err}");

        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let err = open_medium(file, &path, MediumChoice::Exactly(MediumKind::Dax)).unwrap_err();
        assert!(matches!(err, MediumError::DaxUnsupported { .. }), "{err}");
        assert!(err.to_string().contains("MAP_SYNC"));

        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let medium = open_medium(file, &path, MediumChoice::Auto).unwrap();
        assert_ne!(medium.kind(), MediumKind::Dax);
    }
}

#[test]
fn dax_is_refused_on_a_disk_filesystem() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    assert_refused(dir.path());
}

#[test]
fn dax_is_refused_on_tmpfs() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    assert_refused(dir.path());
}

fn source_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn nontemporal_copy_is_exact_at_every_alignment_and_length() {
    let src = source_bytes(600);
    let lengths = [
        0, 1, 2, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 200, 511,
    ];
    for instr in available_instructions() {
        for dst_off in 0..48 {
            for src_off in [0, 1, 5, 8, 13] {
                for &len in &lengths {
                    let mut buf = vec![0xeeu8; 640];
                    let dst = &mut buf[dst_off..dst_off + len];
                    copy_nontemporal(instr, dst, &src[src_off..src_off + len]);
                    assert_eq!(
                        &buf[dst_off..dst_off + len],
                        &src[src_off..src_off + len],
                        "{instr:?} dst+{dst_off} src+{src_off} len {len}"
                    );
                    assert!(
                        buf[..dst_off].iter().all(|&b| b == 0xee),
                        "bytes before the copy changed"
                    );
                    assert!(
                        buf[dst_off + len..].iter().all(|&b| b == 0xee),
                        "bytes after the copy changed"
                    );
                }
            }
        }
    }
}

#[test]
fn write_back_keeps_contents() {
    let data = source_bytes(4096 + 77);
    for instr in available_instructions() {
        let mut copy = data.clone();
        for (off, len) in [
            (0, 0),
            (0, 1),
            (3, 64),
            (63, 2),
            (100, 4000),
            (0, 4096 + 77),
        ] {
            write_back(instr, &copy[off..off + len]);
            store_fence();
            assert_eq!(copy, data, "{instr:?} {off}+{len}");
        }
        // Stores after a write-back are still seen.
        copy[5] ^= 0xff;
        write_back(instr, &copy);
        store_fence();
        assert_eq!(copy[5], data[5] ^ 0xff);
    }
}

#[test]
#[should_panic(expected = "equal lengths")]
fn nontemporal_copy_rejects_mismatched_lengths() {
    let mut dst = [0u8; 4];
    copy_nontemporal(FlushInstruction::Clflush, &mut dst, &[1, 2, 3]);
}
