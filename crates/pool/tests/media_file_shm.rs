//! The `file` and `shm` media: round trips through reopen, growth, aliasing with `map_range`,
//! medium selection by `open_medium`, and a writer killed with SIGKILL.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use kioku_pool::media::mapping::{page_size, Mapping};
use kioku_pool::media::{open_medium, Medium, MediumChoice, MediumError, MediumKind};

/// A directory on the disk filesystem holding the build (never tmpfs in practice).
fn disk_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir on disk")
}

/// A directory on tmpfs, removed when dropped.
fn shm_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").expect("temp dir in /dev/shm")
}

fn dir_for(kind: MediumKind) -> tempfile::TempDir {
    match kind {
        MediumKind::Shm => shm_dir(),
        _ => disk_dir(),
    }
}

fn create_file(path: &Path, len: u64) -> File {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .expect("create pool file");
    file.set_len(len).expect("set length");
    file
}

fn reopen(path: &Path, kind: MediumKind) -> Box<dyn Medium> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("reopen");
    open_medium(file, path, MediumChoice::Exactly(kind)).expect("open medium")
}

/// Distinct bytes for record `seed`, so a misplaced copy is caught.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            ((i as u64)
                .wrapping_mul(31)
                .wrapping_add(seed.wrapping_mul(131))
                % 251) as u8
                ^ 0x5a
        })
        .collect()
}

fn store(medium: &dyn Medium, off: u64, bytes: &[u8]) {
    assert!(off + bytes.len() as u64 <= medium.len());
    // SAFETY: the range lies inside the medium's mapping (asserted above) and nothing else
    // touches it during the test.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            medium.as_ptr().add(off as usize),
            bytes.len(),
        )
    };
}

fn load(medium: &dyn Medium, off: u64, len: usize) -> Vec<u8> {
    assert!(off + len as u64 <= medium.len());
    // SAFETY: as in `store`.
    unsafe { std::slice::from_raw_parts(medium.as_ptr().add(off as usize), len) }.to_vec()
}

fn round_trip(kind: MediumKind) {
    let dir = dir_for(kind);
    let path = dir.path().join("round.pool");
    let file = create_file(&path, 64 * 1024);
    let medium = open_medium(file, &path, MediumChoice::Exactly(kind)).unwrap();
    assert_eq!(medium.kind(), kind);
    assert_eq!(medium.len(), 64 * 1024);

    let data = pattern(1, 10_000);
    store(&*medium, 5_003, &data);
    medium.persist(5_003, data.len() as u64).unwrap();
    let more = pattern(2, 777);
    medium.write_persist(40_001, &more).unwrap();
    drop(medium);

    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 64 * 1024);
    assert_eq!(&on_disk[5_003..15_003], &data[..]);
    assert_eq!(&on_disk[40_001..40_778], &more[..]);
    assert!(on_disk[..5_003].iter().all(|&b| b == 0));

    let again = reopen(&path, kind);
    assert_eq!(load(&*again, 5_003, data.len()), data);
}

#[test]
fn file_round_trip_survives_reopen() {
    round_trip(MediumKind::File);
}

#[test]
fn shm_round_trip_survives_reopen() {
    round_trip(MediumKind::Shm);
}

fn grow_keeps_data(kind: MediumKind) {
    let dir = dir_for(kind);
    let path = dir.path().join("grow.pool");
    let page = page_size() as u64;
    let mut medium =
        open_medium(create_file(&path, page), &path, MediumChoice::Exactly(kind)).unwrap();
    let head = pattern(3, page as usize);
    store(&*medium, 0, &head);
    medium.persist(0, page).unwrap();

    let new_len = 3 * page + 100;
    medium.grow(new_len).unwrap();
    assert_eq!(medium.len(), new_len);
    assert_eq!(load(&*medium, 0, page as usize), head);
    assert!(load(&*medium, page, (new_len - page) as usize)
        .iter()
        .all(|&b| b == 0));
    let tail = pattern(4, 300);
    store(&*medium, new_len - 300, &tail);
    medium.persist(new_len - 300, 300).unwrap();
    // Growing to the current length is a no-op; shrinking is refused.
    medium.grow(new_len).unwrap();
    assert!(matches!(medium.grow(page), Err(MediumError::Shrink { .. })));
    drop(medium);

    assert_eq!(std::fs::metadata(&path).unwrap().len(), new_len);
    let again = reopen(&path, kind);
    assert_eq!(again.len(), new_len);
    assert_eq!(load(&*again, 0, page as usize), head);
    assert_eq!(load(&*again, new_len - 300, 300), tail);
}

#[test]
fn file_grow_keeps_data_and_zero_fills() {
    grow_keeps_data(MediumKind::File);
}

#[test]
fn shm_grow_keeps_data_and_zero_fills() {
    grow_keeps_data(MediumKind::Shm);
}

/// A medium moved out of an address range keeps its bytes, leaves the range, and still
/// persists by offset; a range it does not touch leaves it where it is.
fn move_clear_keeps_data(kind: MediumKind) {
    let dir = dir_for(kind);
    let path = dir.path().join("move.pool");
    let len = 4 * page_size();
    let mut medium = open_medium(
        create_file(&path, len as u64),
        &path,
        MediumChoice::Exactly(kind),
    )
    .unwrap();
    let bytes = pattern(9, len);
    store(&*medium, 0, &bytes);
    let before = medium.as_ptr() as usize;
    // A range ending where the mapping starts does not overlap it.
    let below = before - len..before;
    medium.move_clear_of(std::slice::from_ref(&below)).unwrap();
    assert_eq!(medium.as_ptr() as usize, before);
    // One covering its middle page does.
    let middle = before + page_size()..before + 2 * page_size();
    medium.move_clear_of(std::slice::from_ref(&middle)).unwrap();
    let after = medium.as_ptr() as usize;
    assert!(
        after + len <= middle.start || after >= middle.end,
        "{after:#x} still overlaps"
    );
    assert_eq!(load(&*medium, 0, len), bytes);
    // A range far larger than the medium around it (a region's reservation the pool landed
    // in): the free places the kernel offers next lie inside it, pool-sized step by step.
    let at = medium.as_ptr() as usize;
    let wide = at - (512 << 20)..at + (512 << 20);
    medium.move_clear_of(std::slice::from_ref(&wide)).unwrap();
    let after = medium.as_ptr() as usize;
    assert!(
        after + len <= wide.start || after >= wide.end,
        "{after:#x} still inside the wide range"
    );
    assert_eq!(load(&*medium, 0, len), bytes);
    let tail = pattern(10, 100);
    store(&*medium, len as u64 - 100, &tail);
    medium.persist(0, len as u64).unwrap();
    drop(medium);
    let again = reopen(&path, kind);
    assert_eq!(load(&*again, 0, 100), bytes[..100]);
    assert_eq!(load(&*again, len as u64 - 100, 100), tail);
}

#[test]
fn file_moves_clear_of_a_range_with_its_data() {
    move_clear_keeps_data(MediumKind::File);
}

#[test]
fn shm_moves_clear_of_a_range_with_its_data() {
    move_clear_keeps_data(MediumKind::Shm);
}

#[test]
fn zero_length_file_maps_nothing_until_grown() {
    for kind in [MediumKind::File, MediumKind::Shm] {
        let dir = dir_for(kind);
        let path = dir.path().join("empty.pool");
        let mut medium = open_medium(create_file(&path, 0), &path, MediumChoice::Auto).unwrap();
        assert_eq!(medium.kind(), kind);
        assert!(medium.is_empty());
        medium.persist(0, 0).unwrap();
        assert!(matches!(
            medium.flush(0, 1),
            Err(MediumError::OutOfRange {
                off: 0,
                len: 1,
                size: 0
            })
        ));

        medium.grow(8192).unwrap();
        let data = pattern(5, 8192);
        medium.write_persist(0, &data).unwrap();
        drop(medium);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}

#[test]
fn out_of_range_is_refused() {
    let dir = disk_dir();
    let path = dir.path().join("range.pool");
    let medium = open_medium(create_file(&path, 4096), &path, MediumChoice::Auto).unwrap();
    assert!(matches!(
        medium.flush(4000, 97),
        Err(MediumError::OutOfRange { .. })
    ));
    assert!(matches!(
        medium.flush(u64::MAX, 2),
        Err(MediumError::OutOfRange { .. })
    ));
    assert!(matches!(
        medium.write_persist(4095, &[1, 2]),
        Err(MediumError::OutOfRange { .. })
    ));
    assert!(matches!(
        medium.map_range(std::ptr::null_mut(), 0, 8192, false),
        Err(MediumError::OutOfRange { .. })
    ));
    medium.flush(4000, 96).unwrap();
}

/// Stores through an alias mapping are made durable by flushing the same offsets.
fn alias_by_offset(kind: MediumKind) {
    let dir = dir_for(kind);
    let path = dir.path().join("alias.pool");
    let page = page_size() as u64;
    let medium = open_medium(
        create_file(&path, 4 * page),
        &path,
        MediumChoice::Exactly(kind),
    )
    .unwrap();

    let alias = medium
        .map_range(std::ptr::null_mut(), page, 2 * page, false)
        .unwrap();
    assert_eq!(alias.len(), 2 * page as usize);
    assert_ne!(alias.as_ptr(), medium.as_ptr());
    let data = pattern(6, 1000);
    // SAFETY: 100 + 1000 bytes lie inside the 2-page alias, which nothing else writes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), alias.as_ptr().add(100), data.len()) };
    medium.persist(page + 100, data.len() as u64).unwrap();
    assert_eq!(load(&*medium, page + 100, data.len()), data);

    // And the other way round: a store through the main mapping shows in the alias.
    store(&*medium, 2 * page, &[7; 8]);
    // SAFETY: offset `page` of the alias is medium offset 2*page, inside the alias.
    let seen = unsafe { std::slice::from_raw_parts(alias.as_ptr().add(page as usize), 8) }.to_vec();
    assert_eq!(seen, [7; 8]);
    drop(alias);
    drop(medium);

    let again = reopen(&path, kind);
    assert_eq!(load(&*again, page + 100, data.len()), data);
}

#[test]
fn file_alias_store_is_flushed_by_offset() {
    alias_by_offset(MediumKind::File);
}

#[test]
fn shm_alias_store_is_flushed_by_offset() {
    alias_by_offset(MediumKind::Shm);
}

/// Address space reserved with an anonymous mapping, released on drop (unless replaced).
struct Reserved {
    addr: *mut u8,
    len: usize,
}

impl Reserved {
    fn new(len: usize) -> Self {
        // SAFETY: an anonymous PROT_NONE mapping at a kernel-chosen address touches nothing else.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED, "reserve address space");
        Reserved {
            addr: addr.cast(),
            len,
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        // SAFETY: the range was reserved by `new` and is no longer used.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

#[test]
fn fixed_mapping_lands_at_the_requested_address() {
    for kind in [MediumKind::File, MediumKind::Shm] {
        let dir = dir_for(kind);
        let path = dir.path().join("fixed.pool");
        let page = page_size();
        let medium = open_medium(
            create_file(&path, 4 * page as u64),
            &path,
            MediumChoice::Exactly(kind),
        )
        .unwrap();
        let reserved = Reserved::new(2 * page);
        let fixed = medium
            .map_range(reserved.addr, 2 * page as u64, page as u64, true)
            .unwrap();
        assert_eq!(fixed.as_ptr(), reserved.addr);
        // SAFETY: the first page of the reservation now maps medium page 2.
        unsafe { std::ptr::write_bytes(fixed.as_ptr().add(17), 0xab, 40) };
        medium.persist(2 * page as u64 + 17, 40).unwrap();
        assert_eq!(load(&*medium, 2 * page as u64 + 17, 40), vec![0xab; 40]);
        // Dropping `fixed` unmaps its page; `reserved` then unmaps the whole range, which is
        // harmless for the already unmapped part.
        drop(fixed);
        drop(reserved);
        drop(medium);
        assert_eq!(
            std::fs::read(&path).unwrap()[2 * page + 17..2 * page + 57],
            [0xab; 40]
        );
    }
}

#[test]
fn map_range_needs_page_aligned_offsets() {
    let dir = disk_dir();
    let path = dir.path().join("align.pool");
    let medium = open_medium(create_file(&path, 8192), &path, MediumChoice::Auto).unwrap();
    assert!(matches!(
        medium.map_range(std::ptr::null_mut(), 100, 100, false),
        Err(MediumError::Misaligned { off: 100, .. })
    ));
    let empty = medium
        .map_range(std::ptr::null_mut(), 4096, 0, false)
        .unwrap();
    assert!(empty.is_empty());
}

#[test]
fn auto_picks_file_on_disk_and_shm_on_tmpfs() {
    let disk = disk_dir();
    let path = disk.path().join("auto.pool");
    let medium = open_medium(create_file(&path, 4096), &path, MediumChoice::Auto).unwrap();
    assert_eq!(medium.kind(), MediumKind::File);

    let shm = shm_dir();
    let path = shm.path().join("auto.pool");
    let medium = open_medium(create_file(&path, 4096), &path, MediumChoice::Auto).unwrap();
    assert_eq!(medium.kind(), MediumKind::Shm);
}

#[test]
fn explicit_choices_off_their_filesystem_are_refused() {
    let shm = shm_dir();
    let path = shm.path().join("not-durable.pool");
    let err = open_medium(
        create_file(&path, 4096),
        &path,
        MediumChoice::Exactly(MediumKind::File),
    )
    .unwrap_err();
    assert!(matches!(err, MediumError::TmpfsNotDurable { .. }), "{err}");
    assert!(err.to_string().contains("power loss"));

    let disk = disk_dir();
    let path = disk.path().join("not-tmpfs.pool");
    let err = open_medium(
        create_file(&path, 4096),
        &path,
        MediumChoice::Exactly(MediumKind::Shm),
    )
    .unwrap_err();
    assert!(matches!(err, MediumError::NotTmpfs { .. }), "{err}");

    let path = disk.path().join("sim.pool");
    let err = open_medium(
        create_file(&path, 4096),
        &path,
        MediumChoice::Exactly(MediumKind::Sim),
    )
    .unwrap_err();
    assert!(matches!(err, MediumError::SimNotOpenable { .. }), "{err}");
}

#[test]
fn read_only_file_fails_with_io_error() {
    let dir = disk_dir();
    let path = dir.path().join("ro.pool");
    drop(create_file(&path, 4096));
    let file = File::open(&path).unwrap();
    let err = open_medium(file, &path, MediumChoice::Exactly(MediumKind::File)).unwrap_err();
    assert!(matches!(err, MediumError::Io { op: "mmap", .. }), "{err}");
}

// ---- a writer killed with SIGKILL -------------------------------------------------------------

const CHILD_SPEC: &str = "KIOKU_MEDIA_KILLED_WRITER";
const RECORD: usize = 4096 + 13;
const RECORDS: usize = 8;
const KILLED_AT: usize = 5;

/// Run by `killed_writer_*` in a child process of this test binary: persists records one by
/// one, reporting each on stdout, and kills itself with SIGKILL halfway through storing record
/// `KILLED_AT`. Does nothing when run without the parent's environment.
#[test]
#[ignore = "helper, run as a child process by the killed_writer_* tests"]
fn killed_writer_child() {
    let Ok(spec) = std::env::var(CHILD_SPEC) else {
        return;
    };
    let (kind, path) = spec.split_once(':').expect("kind:path");
    let kind: MediumKind = kind.parse().unwrap();
    let path = PathBuf::from(path);
    let medium = reopen(&path, kind);
    for i in 0..RECORDS {
        let off = (i * RECORD) as u64;
        let record = pattern(100 + i as u64, RECORD);
        if i == KILLED_AT {
            store(&*medium, off, &record[..RECORD / 2]);
            // SAFETY: kill has no memory-safety preconditions; it ends this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        store(&*medium, off, &record);
        medium.persist(off, RECORD as u64).unwrap();
        println!("persisted {i}");
    }
}

fn killed_writer_keeps_persisted_records(kind: MediumKind) {
    let dir = dir_for(kind);
    let path = dir.path().join("killed.pool");
    drop(create_file(&path, (RECORDS * RECORD) as u64));
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_writer_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_SPEC, format!("{}:{}", kind.name(), path.display()))
        .output()
        .expect("run child");
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGKILL),
        "child should die by SIGKILL; stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let reported: Vec<usize> = stdout
        .lines()
        // libtest may print the test's name on the same line as the first report.
        .filter_map(|l| l.split("persisted ").nth(1))
        .map(|n| n.trim().parse().unwrap())
        .collect();
    assert_eq!(reported, (0..KILLED_AT).collect::<Vec<_>>());

    let medium = reopen(&path, kind);
    for i in reported {
        let record = pattern(100 + i as u64, RECORD);
        assert_eq!(
            load(&*medium, (i * RECORD) as u64, RECORD),
            record,
            "record {i}"
        );
    }
    // The records never started are untouched.
    let never = ((KILLED_AT + 1) * RECORD) as u64;
    assert!(load(&*medium, never, RECORD).iter().all(|&b| b == 0));
}

#[test]
fn killed_writer_keeps_persisted_records_file() {
    killed_writer_keeps_persisted_records(MediumKind::File);
}

#[test]
fn killed_writer_keeps_persisted_records_shm() {
    killed_writer_keeps_persisted_records(MediumKind::Shm);
}

#[test]
fn safe_mapping_refuses_map_fixed_and_can_be_handed_off() {
    let dir = disk_dir();
    let path = dir.path().join("mapping.pool");
    let file = create_file(&path, 8192);
    let err =
        Mapping::map(file.as_fd(), 0, 4096, libc::MAP_SHARED | libc::MAP_FIXED, 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));

    let map = Mapping::map(file.as_fd(), 4096, 4096, libc::MAP_SHARED, 0).unwrap();
    let (ptr, len) = map.into_raw();
    assert_eq!(len, 4096);
    // SAFETY: `into_raw` left the page mapped, and nothing else uses it.
    unsafe { ptr.add(1).write(0x42) };
    // SAFETY: the range came from `into_raw` and is owned once more here.
    let map = unsafe { Mapping::from_raw(ptr, len) };
    assert_eq!(map.as_ptr(), ptr);
    drop(map);
    assert_eq!(std::fs::read(&path).unwrap()[4097], 0x42);
}
