//! A full medium never hurts the program: the pool lives on a tiny tmpfs; when the journal
//! cannot grow it, the verdict says so, the program's calls still run (it finishes with exit
//! status 0), and a later restore refuses with the reason.

mod journal_common;

use std::path::{Path, PathBuf};

use journal_common::trapper::{self, End, Next, Spawn};
use journal_common::*;
use kioku_pool::{CreateOptions, OpenOptions, Pool};
use kioku_run::journal::{Journal, JournalError, JournalOptions, Verdict};

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let c = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: unmounting the file system this test mounted.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn mount_small_tmpfs(at: &Path, size: &str) -> Option<Mount> {
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    st.success().then(|| Mount(at.to_path_buf()))
}

#[test]
fn a_full_medium_marks_the_journal_incomplete_and_the_program_runs_on() {
    let mnt_dir = scratch("mnt");
    let Some(_mount) = mount_small_tmpfs(mnt_dir.path(), "192k") else {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): the full-medium test did not run");
        return;
    };
    let pool_path = mnt_dir.path().join("p.pool");
    let work = scratch("full");
    let opts = JournalOptions {
        segment_len: 64 << 10,
        spare_segments: 1,
        stash_dir: Some(work.path().join(".kioku-stash")),
    };
    let mut pool = Pool::create(&pool_path, &CreateOptions::new("kioku.test")).unwrap();
    pool.commit(&[0]).unwrap();
    let mut j = Journal::create(&mut pool, opts.clone()).unwrap();

    let bin = tempfile::tempdir().unwrap();
    let prog = trapper::compile("workload", bin.path());
    let child = trapper::spawn(&Spawn {
        program: &prog,
        args: vec!["3".into(), "3000".into()],
        cwd: work.path(),
        filters: vec![Journal::filter()],
        stdio: [None; 3],
        traced: true,
    });
    let (mut n, mut incomplete) = (0, Vec::new());
    let end = child.run(|pid, regs| {
        n += 1;
        if n == 20 {
            j.begin_epoch(1);
            j.sync_files().unwrap();
            pool.commit(&[1]).unwrap();
            j.committed(&mut pool, 1).unwrap();
        }
        match j
            .on_trap(&mut pool, pid, pid, regs)
            .expect("a full medium is not an error")
        {
            Verdict::Incomplete { why } => incomplete.push(why),
            Verdict::Run => {}
            v => panic!("unexpected verdict {v:?}"),
        }
        Next::Continue
    });
    eprintln!(
        "segments {} records {} pool len {}",
        j.segments(),
        j.live_records(),
        pool.len()
    );
    assert_eq!(
        end,
        End::Exited(0),
        "every call of the program ran and succeeded"
    );
    assert_eq!(incomplete.len(), 1, "said once: {incomplete:?}");
    assert!(incomplete[0].contains("full"), "{}", incomplete[0]);
    drop(j);
    drop(pool);

    // A restore refuses, with the reason, changing nothing.
    let before = snapshot(work.path());
    let mut pool = Pool::open(&pool_path, &OpenOptions::default()).unwrap();
    let mut j = Journal::open_with(&mut pool, opts).unwrap();
    let e = j.check(&mut pool, 1).unwrap_err();
    match &e {
        JournalError::Incomplete { since, reason } => {
            assert_eq!(*since, 1);
            assert!(reason.contains("full"), "{reason}");
        }
        other => panic!("wrong refusal: {other}"),
    }
    assert!(j.apply(&mut pool, 1).is_err());
    assert_eq!(
        snapshot(work.path()),
        before,
        "a refused restore changes no file"
    );
    eprintln!("refused: {e}");
}
