//! Space a process checkpoint takes: a program that maps 8 GiB and touches 8 MiB (a runtime's
//! reservation) gets a pool of about what it touched, not of what it mapped, and a monitor
//! whose resident memory stays small.

#[path = "common/programs.rs"]
mod programs;

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use programs::*;

const MIB: u64 = 1 << 20;

fn vm_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

#[test]
fn an_untouched_reservation_takes_no_pool_space() {
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm (tmpfs) for the pool");
        return;
    };
    let dir = RunDir::new();
    let pool = shm.path().join("reserve.pool");
    let p = program("reserve", false);
    // 8 GiB mapped read-write, the first 8 MiB rewritten for 3 s, checkpointed every 200 ms.
    let mut child = Command::new(kioku())
        .args(["run", "--pool"])
        .arg(&pool)
        .args(["--medium", "shm", "--interval", "200ms", "--summary-json"])
        .arg(dir.path("s.json"))
        .arg("--")
        .arg(&p)
        .args(["8192", "8", "3"])
        .current_dir(dir.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut pool_peak, mut monitor_peak) = (0u64, 0u64);
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if let Ok(m) = std::fs::metadata(&pool) {
            pool_peak = pool_peak.max(m.blocks() * 512);
        }
        if let Some(h) = vm_hwm(child.id()) {
            monitor_peak = monitor_peak.max(h);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the run did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value = serde_json::from_slice(&dir.read("s.json")).unwrap();
    let checkpoints = s["summary"]["checkpoints"].as_u64().unwrap_or(0);
    assert!(checkpoints >= 2, "checkpoints were taken: {s}");
    let captured = s["summary"]["captured_bytes"].as_u64().unwrap_or(u64::MAX);
    // What the program holds: the 8 MiB it touched, its stack, its libraries' data.
    assert!(
        captured <= 12 * MIB,
        "captured {captured} bytes of an 8 GiB mapping with 8 MiB touched"
    );
    // The bound: the touched memory once, one epoch's rewritten pages while a checkpoint is
    // synced, and the pool's own metadata and file journal — under 40 MiB (it was 16 GiB).
    assert!(
        pool_peak <= 40 * MIB,
        "pool took {} MiB at its peak for 8 MiB touched",
        pool_peak / MIB
    );
    let at_rest = std::fs::metadata(&pool).unwrap().blocks() * 512;
    assert!(
        at_rest <= 24 * MIB,
        "pool takes {} MiB at rest for 8 MiB touched",
        at_rest / MIB
    );
    // The monitor: its own memory plus the pool pages it maps, let go of past 32 MiB.
    assert!(
        monitor_peak <= 64 * MIB,
        "monitor VmHWM {} MiB",
        monitor_peak / MIB
    );
    eprintln!(
        "pool peak {:.1} MiB, at rest {:.1} MiB, monitor VmHWM {:.1} MiB, {checkpoints} checkpoints",
        pool_peak as f64 / MIB as f64,
        at_rest as f64 / MIB as f64,
        monitor_peak as f64 / MIB as f64
    );
}
