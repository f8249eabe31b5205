//! Pool files: a real checkpoint pool, patched by the input, checksums optionally set right,
//! then read the way `kioku inspect`, `kioku pool inspect` and a restore read it.

use std::path::PathBuf;
use std::sync::OnceLock;

use kioku_ckpt::engine::{commit_state_of, Engine, EngineOptions, RegionOptions};
use kioku_pool::format::{self, HEADER_LEN, SLOT_LEN, TABLE_OFF};
use kioku_pool::{OpenOptions, Pool};

struct Template {
    bytes: Vec<u8>,
    /// Where each case is written, and removed again after it (a static is never dropped, so
    /// nothing here may own a directory).
    scratch: PathBuf,
}

/// A pool with two regions and two checkpoints (both contexts written, the second with a
/// region grown), read once into memory.
fn template() -> &'static Template {
    static T: OnceLock<Template> = OnceLock::new();
    T.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("kioku-fuzz")
            .tempdir_in(scratch_parent())
            .expect("scratch directory");
        let path = dir.path().join("template.pool");
        {
            let mut e = Engine::create(&path, &EngineOptions::default()).expect("engine");
            let a = e
                .create_region("a", 3 * 4096, RegionOptions::default())
                .expect("region a");
            e.create_region("b", 4096, RegionOptions::default())
                .expect("region b");
            // SAFETY: region a is mapped read-write for 3 pages at a.addr while `e` lives.
            unsafe { std::ptr::write_bytes(a.addr as *mut u8, 0x5a, 4096) };
            e.checkpoint(b"first").expect("checkpoint 1");
            // SAFETY: as above; page 2 of region a.
            unsafe { std::ptr::write_bytes((a.addr + 8192) as *mut u8, 0xa5, 100) };
            e.resize_region("b", 2 * 4096).expect("resize b");
            e.checkpoint(b"second").expect("checkpoint 2");
        }
        let bytes = std::fs::read(&path).expect("template");
        let scratch = scratch_parent().join(format!("kioku-fuzz-case-{}.pool", std::process::id()));
        Template { bytes, scratch }
    })
}

fn scratch_parent() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Sets the header's, both slots' and both section tables' checksums to match their bytes.
fn fix_checksums(img: &mut [u8]) {
    if img.len() < format::METADATA_END as usize {
        return;
    }
    let c = format::crc(&img[..HEADER_LEN - 4]);
    put_u32(img, HEADER_LEN - 4, c);
    for (i, &table_off) in TABLE_OFF.iter().enumerate() {
        let s = format::slot_off(i) as usize;
        let entries = (u32_at(img, s + 24) as usize).min(format::MAX_SECTIONS);
        let t = table_off as usize;
        let tc = format::crc(&img[t..t + entries * format::ENTRY_LEN]);
        put_u32(img, s + 28, tc);
        let sc = format::crc(&img[s..s + SLOT_LEN - 4]);
        put_u32(img, s + SLOT_LEN - 4, sc);
    }
}

/// Input: a mode byte (bit 0: set checksums right after patching; bit 1: truncate), then
/// patches of (offset u32, length u8, bytes) applied to the template.
pub fn pool_image(data: &[u8]) {
    let t = template();
    let mut img = t.bytes.clone();
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let mut truncate_to = None;
    if mode & 2 != 0 && rest.len() >= 4 {
        let n = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        truncate_to = Some(n % (img.len() + 1));
        rest = &rest[4..];
    }
    while rest.len() >= 5 {
        let off = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize % img.len();
        let len = (rest[4] as usize).min(rest.len() - 5).min(img.len() - off);
        img[off..off + len].copy_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
    if mode & 1 != 0 {
        fix_checksums(&mut img);
    }
    if let Some(n) = truncate_to {
        img.truncate(n);
    }
    let _ = std::fs::remove_file(&t.scratch);
    std::fs::write(&t.scratch, &img).expect("scratch pool");
    read_like_kioku(&t.scratch);
    let _ = std::fs::remove_file(&t.scratch);
}

fn read_like_kioku(path: &std::path::Path) {
    // `kioku pool inspect` and `kioku inspect`: pread only.
    if let Ok(report) = kioku_pool::inspect::inspect(path) {
        let _ = kioku_ckpt::inspect::inspect(path, &report);
    }
    // What a restore reads first: the pool through its mapping, then the engine's commit.
    let opts = OpenOptions {
        allow_rollback: true,
        ..OpenOptions::default()
    };
    if let Ok(pool) = Pool::open(path, &opts) {
        for s in pool.sections() {
            assert!(
                s.offset.checked_add(s.len).is_some_and(|e| e <= pool.len()),
                "an accepted section lies outside the pool: {s:?}"
            );
        }
        if let Ok(state) = commit_state_of(&pool) {
            let _ = kioku_run::TreeImage::decode(&state.metadata);
        }
    }
}

/// Checkpoint metadata blocks (their checksum is checked before this parser runs, so the
/// input goes straight to it).
pub fn ckpt_meta(data: &[u8]) {
    if let Ok(m) = kioku_ckpt::meta::ContextMeta::decode(data) {
        // What decodes must encode to something that decodes the same.
        let again = kioku_ckpt::meta::ContextMeta::decode(&m.encode())
            .expect("re-encoded metadata decodes");
        assert_eq!(again.encode(), m.encode(), "metadata does not round-trip");
    }
}

/// The process image (JSON after a magic) a restore decodes.
pub fn process_image(data: &[u8]) {
    let _ = kioku_run::TreeImage::decode(data);
}
