//! Restore by mapping: `kioku restore` maps a process's private anonymous memory and fills it on
//! first touch and in the background (examples/proc/lazymem.c). The program must see exactly
//! its checkpoint, anonymous memory must stay anonymous (MADV_DONTNEED reads zeros, a fork
//! copies), the next checkpoint must be exact (KIOKU_VERIFY_CAPTURE=1, set by `spawn_kioku`),
//! a damaged page must kill the program with a clear message, and a monitor or program killed
//! while it fills must leave a pool that restores the same checkpoint.

#[path = "common/programs.rs"]
mod programs;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use programs::*;

/// Waits until `dir/stdout.txt` holds `line` (or the monitor ends: then fails).
fn wait_line(dir: &RunDir, child: &mut Child, line: &str) {
    let t0 = Instant::now();
    loop {
        let out = String::from_utf8_lossy(&dir.read("stdout.txt")).into_owned();
        assert!(
            !out.contains("BAD"),
            "the program saw wrong memory: {out}\n{}",
            stderr_of(dir)
        );
        if out.lines().any(|l| l == line) {
            return;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "kioku ended ({st}) before the program printed {line:?}; stdout:\n{out}\nstderr:\n{}",
                stderr_of(dir)
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "no {line:?} after 120 s; stdout:\n{out}\nstderr:\n{}",
            stderr_of(dir)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The test program, compiled once for all tests (in parallel, each compiling it would replace
/// the file another test's program runs from).
fn lazymem() -> std::path::PathBuf {
    static P: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| program("lazymem", false)).clone()
}

fn checkpoint(dir: &RunDir) {
    checkpoint_pool(dir, &dir.pool());
}

fn checkpoint_pool(dir: &RunDir, pool: &Path) {
    let o = kioku_in(dir, &["checkpoint", "--pool", pool.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "kioku checkpoint failed: {}",
        stderr(&o)
    );
}

/// Kills the program of monitor `child` and waits for the monitor to end.
fn kill(child: &mut Child) {
    kill_program(child, None);
    let _ = child.wait();
}

fn restore(dir: &RunDir) -> Child {
    restore_pool(dir, &dir.pool())
}

fn restore_pool(dir: &RunDir, pool: &Path) -> Child {
    spawn_kioku(
        &[
            "restore",
            "--pool",
            pool.to_str().unwrap(),
            "--interval",
            "0",
            "--summary",
        ],
        dir,
    )
}

/// `lazymem MIB` run, checkpointed once it is ready, killed.
fn checkpointed(mib: &str) -> RunDir {
    let dir = RunDir::new();
    checkpointed_in(mib, &dir, &dir.pool());
    dir
}

/// [`checkpointed`] with the pool at `pool`.
fn checkpointed_in(mib: &str, dir: &RunDir, pool: &Path) {
    let prog = lazymem();
    let mut run = spawn_kioku(
        &[
            "run",
            "--pool",
            pool.to_str().unwrap(),
            "--interval",
            "0",
            "--",
            prog.to_str().unwrap(),
            mib,
        ],
        dir,
    );
    wait_line(dir, &mut run, "ready");
    checkpoint_pool(dir, pool);
    kill(&mut run);
}

fn no_errors(dir: &RunDir) {
    let log = stderr_of(dir);
    assert!(
        !log.contains("ERROR"),
        "an inconsistency was logged:\n{log}"
    );
}

#[test]
fn a_lazily_restored_program_sees_its_checkpoint_and_anonymous_memory_semantics() {
    let dir = checkpointed("48");
    let mut r = restore(&dir);
    // A checkpoint at once, before the fill can have finished: it waits for it, and must
    // capture exactly the checkpoint's memory (KIOKU_VERIFY_CAPTURE compares).
    wait_restored(&dir, &mut r);
    checkpoint(&dir);
    std::fs::write(dir.path("go"), b"").unwrap();
    wait_line(&dir, &mut r, "phase1 ok");
    // What the program did since — pages dropped (zero now), pages rewritten — must be in the
    // next checkpoint exactly.
    checkpoint(&dir);
    kill(&mut r);
    let mut r = restore(&dir);
    wait_restored(&dir, &mut r);
    std::fs::write(dir.path("go2"), b"").unwrap();
    wait_line(&dir, &mut r, "phase2 ok");
    let st = r.wait().unwrap();
    assert!(st.success(), "kioku restore: {st}\n{}", stderr_of(&dir));
    let log = stderr_of(&dir);
    assert!(
        log.contains("MiB mapped to fill on first touch") && !log.contains(", 0.0 MiB mapped"),
        "the restore did not map memory lazily:\n{log}"
    );
    no_errors(&dir);
}

/// Whether `path` lies on tmpfs (where the monitor's engine is sparse: one copy).
fn on_tmpfs(path: &Path) -> bool {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a plain C structure, for which all zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a structure we own, which statfs fills.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}

/// What `pool` takes of its medium (allocated bytes, not its length).
fn allocated(pool: &Path) -> u64 {
    std::fs::metadata(pool)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0)
}

#[test]
fn a_lazy_restore_of_a_sparse_pool_reads_no_hole_and_keeps_one_copy() {
    // On tmpfs the engine is sparse: pages that are zero at a checkpoint are holes, and the
    // running context is emptied after each checkpoint. A lazy restore must never read a hole
    // (reading one through a mapping fills it: the pool would grow by every zero page) nor
    // copy it, and the recovery it completes at the next checkpoint must leave one copy.
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm (tmpfs) for the pool");
        return;
    };
    const MIB: u64 = 1 << 20;
    let dir = RunDir::new();
    let pool = shm.path().join("lazy.pool");
    // 48 MiB: a quarter of its pages zero (12 MiB), the rest a pattern.
    checkpointed_in("48", &dir, &pool);
    let before = allocated(&pool);
    let mut r = restore_pool(&dir, &pool);
    wait_restored(&dir, &mut r);
    std::fs::write(dir.path("go"), b"").unwrap();
    // Phase 1 reads every page: each was filled (or is a hole) by now.
    wait_line(&dir, &mut r, "phase1 ok");
    let filled = allocated(&pool);
    eprintln!("pool allocated: {before} bytes before the restore, {filled} once filled");
    assert!(
        filled <= before + 2 * MIB,
        "the pool grew from {before} to {filled} bytes while the restore filled memory: holes were read"
    );
    // The first checkpoint completes the recovery (verify, sync, commit) and must capture
    // exactly (KIOKU_VERIFY_CAPTURE); afterwards the pool holds the memory once.
    checkpoint_pool(&dir, &pool);
    let t0 = Instant::now();
    loop {
        let now = allocated(&pool);
        eprintln!("pool allocated after the checkpoint: {now}");
        // The memory once, as before the restore (36 MiB of data pages, the file journal and
        // metadata); a copy of the zero pages would be 12 MiB more.
        if now <= before + 6 * MIB {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the pool takes {} MiB after a checkpoint, {} MiB before the restore",
            now / MIB,
            before / MIB
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(&mut r);
    let mut r = restore_pool(&dir, &pool);
    wait_restored(&dir, &mut r);
    std::fs::write(dir.path("go2"), b"").unwrap();
    wait_line(&dir, &mut r, "phase2 ok");
    let st = r.wait().unwrap();
    assert!(st.success(), "kioku restore: {st}\n{}", stderr_of(&dir));
    no_errors(&dir);
}

/// Waits for `kioku restore --summary`'s line saying the tree is back.
fn wait_restored(dir: &RunDir, child: &mut Child) {
    let t0 = Instant::now();
    while !stderr_of(dir).contains("kioku: restored") {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("kioku restore ended ({st}):\n{}", stderr_of(dir));
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no restore after 60 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn the_eager_restore_stays_available_as_a_baseline() {
    let dir = checkpointed("8");
    let pool = dir.pool();
    let mut r = std::process::Command::new(kioku())
        .args([
            "restore",
            "--pool",
            pool.to_str().unwrap(),
            "--interval",
            "0",
            "--summary",
        ])
        .current_dir(dir.dir.path())
        .env("KIOKU_EAGER_RESTORE", "1")
        .env("KIOKU_VERIFY_CAPTURE", "1")
        .stdin(std::process::Stdio::null())
        .stdout(
            std::fs::OpenOptions::new()
                .append(true)
                .open(dir.path("stdout.txt"))
                .unwrap(),
        )
        .stderr(
            std::fs::OpenOptions::new()
                .append(true)
                .open(dir.path("stderr.txt"))
                .unwrap(),
        )
        .spawn()
        .unwrap();
    wait_restored(&dir, &mut r);
    std::fs::write(dir.path("go"), b"").unwrap();
    wait_line(&dir, &mut r, "phase1 ok");
    std::fs::write(dir.path("go2"), b"").unwrap();
    wait_line(&dir, &mut r, "phase2 ok");
    assert!(r.wait().unwrap().success());
    assert!(
        stderr_of(&dir).contains(", 0.0 MiB mapped to fill on first touch"),
        "KIOKU_EAGER_RESTORE=1 still mapped lazily:\n{}",
        stderr_of(&dir)
    );
    no_errors(&dir);
}

/// Page `p`'s bytes as lazymem writes them (pattern phase 1).
fn page_pattern(p: u64) -> Vec<u8> {
    (0..512u64)
        .flat_map(|w| {
            ((p.wrapping_mul(0x9E3779B97F4A7C15)) ^ (w.wrapping_mul(0x100000001B3)) ^ 1)
                .to_le_bytes()
        })
        .collect()
}

#[test]
fn a_page_damaged_in_both_contexts_kills_the_program_with_a_clear_message() {
    let dir = checkpointed("8");
    // Damage one page of the program's memory in both contexts of the pool (it appears once
    // in each). The restore reads no page before the program runs: only the lazy fill's check
    // can find it.
    let pool = dir.pool();
    let mut bytes = std::fs::read(&pool).unwrap();
    let want = page_pattern(1234);
    let mut hits = 0;
    let mut at = 0;
    while let Some(i) = bytes[at..]
        .windows(want.len())
        .position(|w| w == want.as_slice())
    {
        let i = at + i;
        bytes[i + 100] ^= 0x5a;
        hits += 1;
        at = i + want.len();
    }
    // Twice in a pool on a disk (two contexts); once in a sparse pool on tmpfs (one copy:
    // the other context holds a hole, which fails the page's checksum too).
    let want_hits = if on_tmpfs(&pool) { 1 } else { 2 };
    assert_eq!(
        hits, want_hits,
        "page 1234 should be in the pool once per context holding it"
    );
    std::fs::write(&pool, &bytes).unwrap();
    let mut r = restore(&dir);
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = r.try_wait().unwrap() {
            break st;
        }
        // (If the program waits for "go", it may still be filling: let it run on.)
        std::fs::write(dir.path("go"), b"").unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the restore never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let log = stderr_of(&dir);
    let out = String::from_utf8_lossy(&dir.read("stdout.txt")).into_owned();
    assert!(!st.success(), "a damaged restore succeeded:\n{log}");
    assert!(
        log.contains("the checkpoint is damaged") && log.contains("rather than run on wrong data"),
        "no clear message:\n{log}"
    );
    assert!(
        !out.contains("phase1 ok") && !out.contains("BAD"),
        "the program ran on: {out}"
    );
}

#[test]
fn a_monitor_or_program_killed_while_filling_leaves_the_same_checkpoint() {
    let dir = checkpointed("128");
    for round in 0..3 {
        let mut r = restore(&dir);
        wait_restored(&dir, &mut r);
        // The fill of 128 MiB is under way: kill the monitor itself, or the program.
        if round == 1 {
            kill_program(&mut r, None);
        } else {
            sigkill(r.id() as i32);
        }
        let _ = r.wait();
    }
    let mut r = restore(&dir);
    wait_restored(&dir, &mut r);
    std::fs::write(dir.path("go"), b"").unwrap();
    wait_line(&dir, &mut r, "phase1 ok");
    std::fs::write(dir.path("go2"), b"").unwrap();
    wait_line(&dir, &mut r, "phase2 ok");
    assert!(r.wait().unwrap().success(), "{}", stderr_of(&dir));
    no_errors(&dir);
}

/// `partmap` (examples/proc/partmap.c) run and checkpointed once it is ready: a 3 MiB mapping of
/// which the capture's area covers only the first MiB.
fn partmap_checkpointed(dir: &RunDir) -> Child {
    static P: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let prog = P.get_or_init(|| program("partmap", false));
    let pool = dir.pool();
    let mut run = spawn_kioku(
        &[
            "run",
            "--pool",
            pool.to_str().unwrap(),
            "--interval",
            "0",
            "--",
            prog.to_str().unwrap(),
        ],
        dir,
    );
    wait_line(dir, &mut run, "ready");
    checkpoint(dir);
    run
}

/// Lets `partmap` grow its mapping and checks that it could.
fn partmap_grows(dir: &RunDir, mut child: Child) {
    std::fs::write(dir.path("go"), b"").unwrap();
    wait_line(dir, &mut child, "grown");
    let st = child.wait().unwrap();
    assert!(st.success(), "kioku: {st}\n{}", stderr_of(dir));
    no_errors(dir);
}

// Issue 18 (heap exiting 1 now and then): write tracking registered only the area's part of a
// mapping, which split it, so the program's mremap growing the mapping failed with EFAULT.
#[test]
fn a_mapping_captured_in_part_stays_one_mapping_for_the_program() {
    let dir = RunDir::new();
    let run = partmap_checkpointed(&dir);
    partmap_grows(&dir, run);
}

// The same after a restore by mapping (its userfaultfd registration split it the same way).
#[test]
fn a_mapping_restored_in_part_stays_one_mapping_for_the_program() {
    let dir = RunDir::new();
    let mut run = partmap_checkpointed(&dir);
    kill(&mut run);
    let mut r = restore(&dir);
    wait_restored(&dir, &mut r);
    partmap_grows(&dir, r);
}
