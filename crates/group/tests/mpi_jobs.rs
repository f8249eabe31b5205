//! Real MPI jobs (Open MPI's mpirun, several ranks on this machine) running
//! `examples/mpi/group_check.c` against the group library: checkpoints, ranks killed, pools
//! deleted (replacement nodes) or damaged, restarts, recovery, and a check of every protected
//! byte against data recomputed from nothing. Parity is checked against a fresh full encoding
//! after every checkpoint (`kioku_group_verify`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kioku_testkit::cprog;

/// The directory holding `libkioku_group.so` nearest above this test executable.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .skip(1)
        .find(|d| d.join("libkioku_group.so").exists())
        .unwrap_or_else(|| panic!("no libkioku_group.so above {}", exe.display()))
        .to_path_buf()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `group_check` built with mpicc, or `None` (said loudly) when MPI is not installed.
fn program() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<(tempfile::TempDir, PathBuf)>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let have = |c: &str| {
                Command::new(c)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            };
            if !have("mpicc") || !have("mpirun") {
                eprintln!("SKIPPED: mpicc/mpirun not found (Open MPI: `make deps`, or apt-get install openmpi-bin libopenmpi-dev)");
                return None;
            }
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("group_check");
            let lib = lib_dir();
            let o = Command::new("mpicc")
                .args(["-std=c99", "-D_POSIX_C_SOURCE=200809L", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
                .arg(repo().join("include"))
                .arg(repo().join("examples/mpi/group_check.c"))
                .arg("-o")
                .arg(&out)
                .arg(format!("-L{}", lib.display()))
                .arg("-lkioku_group")
                // DT_RPATH, not RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets (which can
                // hold a stale copy of the library in target/debug).
                .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
                .output()
                .unwrap();
            assert!(o.status.success(), "mpicc: {}", String::from_utf8_lossy(&o.stderr));
            Some((dir, out))
        })
        .as_ref()
        .map(|(_, p)| p.clone())
}

struct Job {
    dir: tempfile::TempDir,
    np: usize,
    env: Vec<(String, String)>,
}

struct Outcome {
    ok: bool,
    out: String,
}

impl Outcome {
    fn lines(&self, prefix: &str) -> Vec<&str> {
        self.out.lines().filter(|l| l.starts_with(prefix)).collect()
    }
}

impl Job {
    fn new(np: usize, group_size: usize, levels: &str) -> Job {
        Job {
            dir: tempfile::tempdir().unwrap(),
            np,
            env: vec![
                ("KIOKU_GROUP_SIZE".into(), group_size.to_string()),
                ("KIOKU_PARITY".into(), "2".into()),
                ("KIOKU_LEVELS".into(), levels.into()),
                ("KIOKU_MEDIUM".into(), "file".into()),
                ("GROUP_CHECK_VERIFY".into(), "1".into()),
            ],
        }
    }

    fn set(&mut self, k: &str, v: &str) -> &mut Job {
        self.env.retain(|(x, _)| x != k);
        self.env.push((k.into(), v.into()));
        self
    }

    fn pool(&self, rank: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!(".kioku/group/job.{rank}.pool"))
    }

    /// Runs `group_check ARGS` under mpirun with `np` ranks.
    fn run(&self, np: usize, args: &[&str]) -> Outcome {
        let prog = program().expect("checked by the caller");
        let mut c = Command::new("mpirun");
        c.args(["--oversubscribe", "--bind-to", "none", "-np"])
            .arg(np.to_string())
            .arg(&prog)
            .args(args)
            .current_dir(self.dir.path())
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_mpi_yield_when_idle", "1")
            // The library the program was linked with: cargo's LD_LIBRARY_PATH may name a
            // directory with an older copy first (`cargo test` does not refresh target/debug's).
            .env("LD_LIBRARY_PATH", lib_dir());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        let out =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        Outcome {
            ok: o.status.success(),
            out,
        }
    }

    fn lose(&self, ranks: &[usize]) {
        for &r in ranks {
            std::fs::remove_file(self.pool(r)).unwrap();
        }
    }

    /// A run that kills `rank` after writing iteration `at` (the job dies with it).
    fn crash(&self, args: &[&str], rank: usize, at: u64) {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.push(rank.to_string());
        a.push(at.to_string());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = self.run(self.np, &a);
        assert!(!o.ok, "the job should have died: {}", o.out);
        assert!(o.lines("dying").len() == 1, "{}", o.out);
    }

    /// A restart that must recover to iteration `iter` (each rank verifies every byte), then
    /// finish; `lost` ranks rebuilt from `level`.
    fn recover(&self, args: &[&str], iter: u64, lost: usize, level: u8) -> Outcome {
        let o = self.run(self.np, args);
        assert!(o.ok, "restart failed:\n{}", o.out);
        let rec = o.lines("recovered");
        assert_eq!(rec.len(), self.np, "{}", o.out);
        for l in rec {
            assert!(
                l.contains(&format!("iter {iter} level {level} lost {lost}")),
                "want iter {iter} level {level} lost {lost}: {l}\n{}",
                o.out
            );
        }
        assert_eq!(o.lines("verified").len(), self.np, "{}", o.out);
        assert_eq!(o.lines("done").len(), self.np, "{}", o.out);
        o
    }
}

/// `make soak-group` sets KIOKU_GROUP_SOAK=1: the long cases run, and the property test runs
/// many more sequences.
fn soak() -> bool {
    std::env::var("KIOKU_GROUP_SOAK").is_ok_and(|v| v == "1")
}

macro_rules! need_soak {
    () => {
        if !soak() {
            eprintln!("SKIPPED outside `make soak-group` (KIOKU_GROUP_SOAK=1): a long case");
            return;
        }
    };
}

macro_rules! need_mpi {
    () => {
        if program().is_none() {
            return;
        }
    };
}

#[test]
fn rs_4_plus_2_rebuilds_one_then_two_lost_ranks() {
    need_mpi!();
    let job = Job::new(6, 6, "rs");
    let args = ["10", "96", "dense", "3"];
    job.crash(&args, 2, 6);
    job.lose(&[2]);
    job.recover(&args, 5, 1, 3);
    let args = ["20", "96", "dense", "3"];
    job.crash(&args, 0, 16);
    job.lose(&[1, 4]);
    job.recover(&args, 15, 2, 3);
}

#[test]
fn protected_buffers_of_the_program_are_checkpointed_and_rebuilt_too() {
    need_mpi!();
    let mut job = Job::new(6, 6, "partner,rs");
    job.set("GROUP_CHECK_PROTECT", "1");
    // Levels by iteration: even partner, odd rs. Rank 5 dies writing 9: the last checkpoint is
    // 8 (partner), but 0's copy is at 5, so rs rebuilds 0 and 5 from 7, through the journals.
    let args = ["12", "48", "dense", "23"];
    job.crash(&args, 5, 9);
    job.lose(&[0, 5]);
    job.recover(&args, 7, 2, 3);
}

#[test]
fn rs_8_plus_2_rebuilds_one_then_two_lost_ranks() {
    need_soak!();
    need_mpi!();
    let job = Job::new(10, 10, "rs");
    let args = ["6", "40", "sparse", "3"];
    job.crash(&args, 9, 4);
    job.lose(&[9]);
    job.recover(&args, 3, 1, 3);
    let args = ["10", "40", "sparse", "3"];
    job.crash(&args, 3, 9);
    job.lose(&[0, 7]);
    job.recover(&args, 8, 2, 3);
}

#[test]
fn restart_without_loss_resumes_from_the_last_checkpoint() {
    need_mpi!();
    let job = Job::new(6, 6, "rs");
    let args = ["8", "32", "sparse", "131"];
    job.crash(&args, 4, 5);
    let o = job.recover(&args, 4, 0, 0);
    // Before recovering, the status says what the pools hold.
    assert_eq!(o.lines("pools rank").len(), 6, "{}", o.out);
    assert!(
        o.lines("pools rank").iter().all(|l| l.ends_with("epoch 4")),
        "{}",
        o.out
    );
}

#[test]
fn a_rank_lost_during_encoding_leaves_the_previous_checkpoint() {
    need_mpi!();
    let mut job = Job::new(6, 6, "rs");
    let args = ["8", "64", "dense", "3"];
    job.set("KIOKU_FAULT", "encode:3:5");
    let o = job.run(6, &args);
    assert!(!o.ok, "{}", o.out);
    job.set("KIOKU_FAULT", "");
    job.lose(&[3]);
    job.recover(&args, 4, 1, 3);
}

#[test]
fn a_rank_killed_between_prepare_and_commit_rolls_back_or_forward_as_agreed() {
    need_mpi!();
    let mut job = Job::new(6, 6, "rs");
    let args = ["8", "64", "sparse", "3"];
    job.set("KIOKU_FAULT", "prepared:1:5");
    let o = job.run(6, &args);
    assert!(!o.ok, "{}", o.out);
    job.set("KIOKU_FAULT", "");
    // Rank 1 prepared epoch 5; the others prepared it or not when the job died. Every pool
    // at 5 means 5 was durable everywhere (kept); otherwise 5 is rolled back to 4.
    let o = job.run(6, &args);
    assert!(o.ok, "{}", o.out);
    let rec = o.lines("recovered");
    assert_eq!(rec.len(), 6);
    let iter4 = rec.iter().all(|l| l.contains("iter 4 "));
    let iter5 = rec.iter().all(|l| l.contains("iter 5 "));
    assert!(iter4 || iter5, "{}", o.out);
    assert_eq!(o.lines("verified").len(), 6, "{}", o.out);
}

#[test]
fn a_lost_partner_pair_falls_back_to_the_rs_level_and_journals_roll_survivors_back() {
    need_mpi!();
    let job = Job::new(6, 6, "partner,rs");
    // Levels by iteration: 1 local, 2 partner, 3 rs (i % 4 -> "1213"): rs at 3, 7, 11;
    // partner at 1, 5, 9; local at 2, 6, 10. Rank 2 dies writing 12.
    let args = ["14", "64", "sparse", "1213"];
    job.crash(&args, 2, 12);
    // Ranks 2 and 3: 3's copy is at 2, so the partner level cannot rebuild them; rs (m = 2)
    // can, from epoch 11 — the last checkpoint anyway.
    job.lose(&[2, 3]);
    job.recover(&args, 11, 2, 3);

    // Now a loss the partner level covers, after a local checkpoint moved on past it: the
    // survivors go back to the partner epoch through their journals.
    let args = ["30", "64", "sparse", "1213"];
    job.crash(&args, 5, 23); // 21 partner, 22 local committed
    job.lose(&[5]);
    job.recover(&args, 21, 1, 2);
}

#[test]
fn more_than_m_losses_are_a_clear_collective_error_and_the_survivors_pools_are_kept() {
    need_mpi!();
    let job = Job::new(6, 6, "rs");
    let args = ["6", "32", "sparse", "3"];
    job.crash(&args, 0, 4);
    job.lose(&[0, 2, 4]);
    let before: Vec<Vec<u8>> = [1, 3, 5]
        .iter()
        .map(|&r| std::fs::read(job.pool(r)).unwrap())
        .collect();
    let o = job.run(6, &args);
    assert!(!o.ok);
    let errs = o.lines("error");
    assert!(!errs.is_empty(), "{}", o.out);
    for e in &errs {
        assert!(e.contains("recover -31"), "{e}");
        assert!(
            e.contains("3 ranks of group 0 are lost") && e.contains("2 parity"),
            "{e}"
        );
    }
    for (i, &r) in [1, 3, 5].iter().enumerate() {
        assert!(
            std::fs::read(job.pool(r)).unwrap() == before[i],
            "pool {r} changed"
        );
    }
}

#[test]
fn a_damaged_pool_is_set_aside_and_its_rank_rebuilt() {
    need_mpi!();
    let job = Job::new(6, 6, "rs");
    let args = ["6", "32", "dense", "3"];
    job.crash(&args, 1, 5);
    let junk = b"not a pool at all".repeat(100);
    std::fs::write(job.pool(3), &junk).unwrap();
    job.recover(&args, 4, 1, 3);
    let aside = job.pool(3).with_extension("pool.damaged");
    assert_eq!(
        std::fs::read(aside).unwrap(),
        junk,
        "the damaged file is kept"
    );
}

#[test]
fn bad_restarts_are_refused_clearly() {
    need_mpi!();
    let mut job = Job::new(6, 6, "rs");
    let args = ["6", "32", "sparse", "3"];
    job.crash(&args, 1, 4);
    // Another number of ranks.
    let o = job.run(4, &args);
    assert!(!o.ok);
    assert!(
        o.out.contains("belong to a job of 6 ranks; this job has 4"),
        "{}",
        o.out
    );
    // Other settings than the pools were written with.
    job.set("KIOKU_PARITY", "1");
    let o = job.run(6, &args);
    assert!(!o.ok);
    assert!(
        o.out.contains("restart with the same settings"),
        "{}",
        o.out
    );
    job.set("KIOKU_PARITY", "2");
    // A program that allocates without recovering: refused, the pools untouched.
    job.set("GROUP_CHECK_NO_RECOVER", "1");
    let o = job.run(6, &args);
    assert!(!o.ok);
    assert!(
        o.out.contains("alloc -1") || o.out.contains("call kioku_group_recover()"),
        "{}",
        o.out
    );
    job.env.retain(|(k, _)| k != "GROUP_CHECK_NO_RECOVER");
    // A pool held by another process: refused, naming it.
    {
        let o = kioku_pool::OpenOptions::default();
        let held = kioku_pool::Pool::open(&job.pool(2), &o).unwrap();
        let out = job.run(6, &args);
        assert!(!out.ok);
        assert!(
            out.out.contains("rank 2") && out.out.contains("in use"),
            "{}",
            out.out
        );
        drop(held);
    }
    // Nothing above changed the checkpoint: it still recovers.
    job.recover(&args, 3, 0, 0);
    // A configuration error at init.
    job.set("KIOKU_LEVELS", "mirror");
    let o = job.run(6, &args);
    assert!(!o.ok);
    assert!(
        o.out.contains("init -33") && o.out.contains("KIOKU_LEVELS"),
        "{}",
        o.out
    );
}

/// Property: after any sequence of incremental checkpoints (random levels, patterns, sizes,
/// group shapes), the parity each group holds equals the full encoding of the current data —
/// `kioku_group_verify` recomputes it after every checkpoint and the program aborts on a
/// difference.
#[test]
fn parity_equals_the_full_encoding_after_any_sequence_of_checkpoints() {
    need_mpi!();
    let seed: u64 = std::env::var("KIOKU_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("KIOKU_SEED={seed}");
    let mut x = seed | 1;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..if soak() { 24 } else { 2 } {
        let np = 4 + next(4) as usize;
        let levels: String = (0..1 + next(6))
            .map(|_| ["1", "2", "3"][next(3) as usize])
            .collect();
        let pages = 8 + next(80);
        let pattern = if next(2) == 0 { "sparse" } else { "dense" };
        let mut job = Job::new(np, np, "partner,rs");
        job.set("KIOKU_SEGMENT_PAGES", &(1 + next(16)).to_string());
        let steps = (6 + next(8)).to_string();
        let pages = pages.to_string();
        let o = job.run(np, &[&steps, &pages, pattern, &levels]);
        assert!(
            o.ok && o.lines("done").len() == np,
            "np {np} levels {levels} pages {pages} {pattern} (KIOKU_SEED={seed}):\n{}",
            o.out
        );
    }
}

/// The header compiles as C and as C++, alone and together with kioku.h, and every function
/// it declares is exported by the shared library.
#[test]
fn the_header_compiles_with_kioku_h_and_the_library_exports_it() {
    need_mpi!();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("h.c");
    std::fs::write(
        &src,
        "#include \"kioku.h\"\n#include \"kioku_group.h\"\nint main(void) { return KIOKU_LEVEL_RS - 3; }\n",
    )
    .unwrap();
    cprog::assert_compiles("mpicc", &["-std=c99"], &src);
    // Open MPI's own deprecated C++ bindings do not pass -Wextra -Werror.
    cprog::assert_compiles(
        "mpicxx",
        &[
            "-x",
            "c++",
            "-std=c++17",
            "-DOMPI_SKIP_MPICXX=1",
            "-DMPICH_SKIP_MPICXX=1",
        ],
        &src,
    );
    // struct kioku_group_status has the library's layout.
    let layout = dir.path().join("layout.c");
    std::fs::write(
        &layout,
        "#include <stdio.h>\n#include <stddef.h>\n#include \"kioku_group.h\"\nint main(void) { printf(\"%zu %zu %zu\", sizeof(struct kioku_group_status), offsetof(struct kioku_group_status, recovered_epoch), offsetof(struct kioku_group_status, last_total_ns)); return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("layout");
    let o = Command::new("mpicc")
        .arg("-I")
        .arg(repo().join("include"))
        .arg(&layout)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = Command::new(&exe).output().unwrap();
    let want = format!(
        "{} {} {}",
        std::mem::size_of::<kioku_group::capi::GroupStatus>(),
        std::mem::offset_of!(kioku_group::capi::GroupStatus, recovered_epoch),
        std::mem::offset_of!(kioku_group::capi::GroupStatus, last_total_ns)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), want);

    let header = std::fs::read_to_string(repo().join("include/kioku_group.h")).unwrap();
    let declared: Vec<&str> = header
        .lines()
        .filter(|l| {
            !l.starts_with(' ')
                && !l.starts_with('*')
                && l.contains("kioku_group_")
                && l.contains('(')
        })
        .filter_map(|l| l.split('(').next()?.split_whitespace().last())
        .map(|n| n.trim_start_matches('*'))
        .collect();
    assert!(declared.len() >= 8, "{declared:?}");
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib_dir().join("libkioku_group.so"))
        .output()
        .unwrap();
    let syms = String::from_utf8_lossy(&o.stdout);
    for f in declared {
        assert!(
            syms.lines().any(|l| l.ends_with(&format!(" {f}"))),
            "{f} is not exported"
        );
    }
}

/// Fortran through ISO_C_BINDING: a rank killed during encoding, its pool deleted, the job
/// restarted; every element checked after recovery.
#[test]
fn a_fortran_program_checkpoints_and_recovers() {
    need_mpi!();
    let have = Command::new("gfortran")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("SKIPPED: gfortran not found (`make deps`, or apt-get install gfortran)");
        return;
    }
    let mut job = Job::new(4, 4, "rs");
    let exe = job.dir.path().join("group_fortran");
    let lib = lib_dir();
    let o = Command::new("mpifort")
        .args(["-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(repo().join("examples/mpi/group_fortran.f90"))
        .arg(format!("-L{}", lib.display()))
        .arg("-lkioku_group")
        .arg(
            // DT_RPATH, not RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets (which can hold
            // a stale copy of the library in target/debug).
            format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()),
        )
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mpifort: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    job.set("KIOKU_FAULT", "encode:1:4");
    let run = |job: &Job| {
        let mut c = Command::new("mpirun");
        c.args(["--oversubscribe", "--bind-to", "none", "-np", "4"])
            .arg(&exe)
            .arg("8")
            .current_dir(job.dir.path())
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("LD_LIBRARY_PATH", lib_dir());
        for (k, v) in &job.env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let (ok, out) = run(&job);
    assert!(!ok, "{out}");
    job.set("KIOKU_FAULT", "");
    job.lose(&[1]);
    let (ok, out) = run(&job);
    assert!(ok, "{out}");
    assert_eq!(out.matches("recovered step 3 ok").count(), 4, "{out}");
    assert_eq!(out.matches(" done 8").count(), 4, "{out}");
}

/// The pool-file offset of byte `at` of section `name` (as the live commit places it).
fn section_at(pool: &Path, name: &str, at: u64) -> u64 {
    let r = kioku_pool::inspect::inspect(pool).unwrap();
    let slot = r.slots.iter().find(|s| s.role == "live").unwrap();
    let kioku_pool::examine::SlotState::Intact { sections, .. } = &slot.state else {
        panic!("{}: no intact live commit", pool.display())
    };
    let s = sections
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{}: no section {name}", pool.display()));
    assert!(at < s.len, "{name} is {} bytes", s.len);
    s.offset + at
}

/// The valid context of a checkpoint pool (the one recovery restores).
fn valid_ctx(pool: &Path) -> usize {
    let r = kioku_pool::inspect::inspect(pool).unwrap();
    kioku_ckpt::inspect::inspect(pool, &r)
        .unwrap()
        .unwrap()
        .valid_ctx
}

/// Flips one bit of the byte at `off` of `pool`.
fn flip(pool: &Path, off: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(pool)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, off).unwrap();
    f.write_all_at(&[b[0] ^ 0x04], off).unwrap();
}

/// Damages data page `page` of protected region 1 in both contexts (the program's copy too:
/// only the group's parity holds it then). Region 1 is the engine's region 1 (`u1`).
fn damage_data_page(pool: &Path, page: u64) {
    for ctx in 0..2 {
        flip(
            pool,
            section_at(pool, &format!("ckpt.r1.{ctx}"), page * 4096 + 77),
        );
    }
}

fn healed(line: &str) -> u64 {
    line.split_whitespace()
        .skip_while(|w| *w != "healed")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no healed count in {line}"))
}

/// The trial, and worse: a flipped byte in a data page of a rank's checkpoint (in both
/// contexts, so that only the parity has it), in a parity page of another rank, in the
/// metadata of a third's valid checkpoint: the restart rebuilds them, every byte exact, on
/// every rank, and the parity is whole again (verified after every later checkpoint).
#[test]
fn damaged_data_parity_and_metadata_pages_are_rebuilt_from_parity() {
    need_mpi!();
    let job = Job::new(6, 6, "rs");
    let o = job.run(6, &["4", "48", "dense", "3"]);
    assert!(o.ok, "{}", o.out);
    damage_data_page(&job.pool(2), 7);
    damage_data_page(&job.pool(1), 20);
    flip(&job.pool(4), section_at(&job.pool(4), "g.p3.0", 100));
    let p5 = job.pool(5);
    flip(
        &p5,
        section_at(&p5, &format!("ckpt.meta.{}", valid_ctx(&p5)), 20),
    );
    let o = job.recover(&["6", "48", "dense", "3"], 4, 0, 3);
    let rec = o.lines("recovered");
    for (r, line) in rec.iter().enumerate() {
        let r: usize = line.split_whitespace().nth(2).unwrap().parse().unwrap_or(r);
        let want = u64::from(r == 1 || r == 2 || r == 4);
        assert_eq!(healed(line), want, "rank {r}: {line}\n{}", o.out);
    }
    assert!(!p5.with_extension("pool.damaged").exists());
}

/// A flipped byte in a journaled page, needed when a lost rank makes the job go back to the
/// rs level's epoch, and metadata damaged in both contexts (the pool is lost whole): both
/// rebuilt. Then more damage in one stripe than m: refused, every pool byte for byte as it
/// was, KIOKU_E_CORRUPT on the damaged ranks naming the page, KIOKU_E_LOST on the others.
#[test]
fn a_damaged_journal_page_is_rebuilt_and_more_damage_than_m_is_refused_untouched() {
    need_mpi!();
    let job = Job::new(6, 6, "rs");
    // Levels "31": even iterations rs, odd local; 5 iterations: rs at 4, local 5 journaled.
    let o = job.run(6, &["5", "48", "dense", "31"]);
    assert!(o.ok, "{}", o.out);
    flip(&job.pool(3), section_at(&job.pool(3), "g.j3", 10));
    let p0 = job.pool(0);
    for ctx in 0..2 {
        flip(&p0, section_at(&p0, &format!("ckpt.meta.{ctx}"), 20));
    }
    // On to 8, an rs checkpoint: nothing journaled, no earlier epoch to go back to.
    let o = job.recover(&["8", "48", "dense", "31"], 4, 1, 3);
    let line = o.lines("recovered rank 3 ")[0].to_string();
    assert_eq!(healed(&line), 1, "{line}");
    assert!(p0.with_extension("pool.damaged").exists());

    // Stripe 0, page 0 of RS(4,2) over 6: data chunks of positions 2, 3, 4 (pages 0, 1, 2).
    for (r, page) in [(2, 0), (3, 1), (4, 2)] {
        damage_data_page(&job.pool(r), page);
    }
    let before: Vec<Vec<u8>> = (0..6)
        .map(|r| std::fs::read(job.pool(r)).unwrap())
        .collect();
    let o = job.run(6, &["9", "48", "dense", "31"]);
    assert!(!o.ok, "{}", o.out);
    let errs = o.lines("error");
    assert_eq!(errs.len(), 6, "{}", o.out);
    for e in errs {
        let r: usize = e.split_whitespace().nth(2).unwrap().parse().unwrap();
        let code = if (2..=4).contains(&r) { "-8" } else { "-31" };
        assert!(e.contains(&format!("recover {code} ")), "{e}");
        assert!(
            e.contains("rank 2: region 'u1' page 0; rank 3: region 'u1' page 1")
                && e.contains("fail their checksums"),
            "{e}"
        );
    }
    for (r, b) in before.iter().enumerate() {
        assert!(
            std::fs::read(job.pool(r)).unwrap() == *b,
            "pool {r} changed"
        );
    }
}

/// Background encoding (MPI_THREAD_MULTIPLE): a rank killed at every step of a flight, its
/// pool lost. Before every survivor has logged the flight the job goes back to the previous
/// rs epoch through the journals; after the agreement it finishes the flight and resumes at
/// its epoch. Every byte checked.
#[test]
fn a_rank_lost_at_every_step_of_a_background_encoding() {
    need_mpi!();
    let steps = [
        ("encode", &[2][..]),
        ("recv", &[2]),
        ("logged", &[2, 3]),
        ("agreed", &[3]),
        ("committed", &[3]),
        ("applying", &[3]),
        ("applied", &[3]),
    ];
    // `make test` takes a holder half-way (its new log uncommitted), the undecided step, and
    // the first step a restart must finish (the log found through the committed table);
    // `make soak-group` every step.
    let quick = ["recv", "logged", "committed"];
    for (point, iters) in steps {
        if !soak() && !quick.contains(&point) {
            continue;
        }
        let mut job = Job::new(4, 4, "rs");
        job.set("GROUP_CHECK_THREADS", "1");
        job.set("KIOKU_ASYNC", "1");
        job.set("KIOKU_FAULT", &format!("{point}:1:3"));
        let args = ["5", "24", "dense", "3"];
        let o = job.run(4, &args);
        assert!(!o.ok, "{point}: the job should have died:\n{}", o.out);
        job.set("KIOKU_FAULT", "");
        job.lose(&[1]);
        let o = job.run(4, &args);
        assert!(o.ok, "{point}: restart failed:\n{}", o.out);
        let rec = o.lines("recovered");
        assert_eq!(rec.len(), 4, "{point}: {}", o.out);
        let at: Vec<u64> = rec
            .iter()
            .map(|l| l.split_whitespace().nth(6).unwrap().parse().unwrap())
            .collect();
        assert!(
            at.iter().all(|&i| i == at[0]) && iters.contains(&at[0]),
            "{point}: recovered at {at:?}, want one of {iters:?}\n{}",
            o.out
        );
        assert_eq!(o.lines("verified").len(), 4, "{point}: {}", o.out);
        assert_eq!(o.lines("done").len(), 4, "{point}: {}", o.out);
    }
}

/// A level's first encoding writes its parity in place (there is no older parity to keep, so
/// no redo log). A rank killed during it, its pool lost: the level encodes nothing yet, so the
/// restart refuses clearly (KIOKU_E_LOST) and leaves the survivors' pools as they were; killed
/// once the flight committed, the restart finishes it and rebuilds the rank, every byte checked.
#[test]
fn a_rank_lost_during_the_first_encoding_in_place() {
    need_mpi!();
    for (point, rebuilt) in [("recv", false), ("committed", true)] {
        let mut job = Job::new(4, 4, "rs");
        job.set("GROUP_CHECK_THREADS", "1");
        job.set("KIOKU_ASYNC", "1");
        job.set("KIOKU_FAULT", &format!("{point}:1:1"));
        let args = ["3", "24", "dense", "3"];
        let o = job.run(4, &args);
        assert!(!o.ok, "{point}: the job should have died:\n{}", o.out);
        job.set("KIOKU_FAULT", "");
        job.lose(&[1]);
        let before: Vec<Vec<u8>> = [0, 2, 3]
            .iter()
            .map(|&r| std::fs::read(job.pool(r)).unwrap())
            .collect();
        let o = job.run(4, &args);
        if rebuilt {
            assert!(o.ok, "{point}: restart failed:\n{}", o.out);
            assert_eq!(o.lines("recovered").len(), 4, "{point}: {}", o.out);
            assert_eq!(o.lines("verified").len(), 4, "{point}: {}", o.out);
            assert_eq!(o.lines("done").len(), 4, "{point}: {}", o.out);
        } else {
            assert!(!o.ok, "{point}: nothing to rebuild from:\n{}", o.out);
            let errs = o.lines("error");
            assert!(!errs.is_empty(), "{point}: {}", o.out);
            for e in &errs {
                assert!(e.contains("recover -31"), "{point}: {e}");
            }
            for (i, &r) in [0, 2, 3].iter().enumerate() {
                assert!(
                    std::fs::read(job.pool(r)).unwrap() == before[i],
                    "{point}: pool {r} changed"
                );
            }
        }
    }
}

/// A bit flipped on the medium while the job runs — in a data page of a rank's valid
/// checkpoint and in a parity page it holds — is found by the next scrub
/// (`kioku_group_verify`) and rebuilt (the data page from the program's identical copy, the
/// parity page from the group), before any restart; the parity then matches the data.
#[test]
fn a_scrub_finds_and_rebuilds_damaged_pages_while_the_job_runs() {
    need_mpi!();
    let mut job = Job::new(6, 6, "rs");
    job.set("KIOKU_FAULT", "damage:2:3");
    let o = job.run(6, &["5", "32", "dense", "3"]);
    assert!(o.ok, "{}", o.out);
    let scrubs = o.lines("scrub");
    assert_eq!(scrubs.len(), 6, "{}", o.out);
    for l in scrubs {
        assert!(l.contains("iter 3 healed 2"), "{l}\n{}", o.out);
    }
    assert_eq!(o.lines("done").len(), 6, "{}", o.out);
}

/// Bytes the file system holds for `path` (holes hold none).
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// Memory: once an encoding committed, its redo log and the level's journal are freed (holes
/// in the pool file), so that a pool at rest holds its data twice and its parity, nothing
/// more — with half the pages written every interval, in the background mode (journal and
/// log) and inline (log). The data survives it: a lost rank is rebuilt, every byte checked.
#[test]
fn redo_logs_and_journals_are_freed_once_their_encoding_commits() {
    need_mpi!();
    // Inline encoding (no journal) only in `make soak-group`.
    let modes: &[&str] = if soak() { &["1", "0"] } else { &["1"] };
    for &threads in modes {
        let mut job = Job::new(4, 4, "rs");
        job.set("GROUP_CHECK_THREADS", threads);
        job.set("KIOKU_ASYNC", threads);
        job.set("KIOKU_MEDIUM", "file");
        let args = ["4", "256", "dense", "3"];
        let o = job.run(4, &args);
        assert!(o.ok && o.lines("done").len() == 4, "{}", o.out);
        for r in 0..4 {
            let path = job.pool(r);
            let used = {
                let oo = kioku_pool::OpenOptions::default();
                let pool = kioku_pool::Pool::open(&path, &oo).unwrap();
                for gone in ["g.l3", "g.li3", "g.j3", "g.ji3"] {
                    assert!(
                        pool.section(gone).is_none(),
                        "threads {threads}: rank {r} keeps {gone}"
                    );
                }
                let sections: u64 = pool.sections().iter().map(|s| s.len).sum();
                assert!(
                    sections < pool.len(),
                    "threads {threads}: rank {r}: nothing was freed"
                );
                sections
            };
            // The sections in use plus the pool's own header and tables (well under 1 MiB).
            let held = allocated(&path);
            assert!(
                held <= used + (1 << 20),
                "threads {threads}: rank {r} holds {held} bytes for {used} in sections"
            );
        }
        job.lose(&[2]);
        let args = ["6", "256", "dense", "3"];
        job.recover(&args, 4, 1, 3);
    }
}
