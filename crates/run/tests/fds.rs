//! Descriptors of stopped processes captured from outside and restored into fresh processes:
//! each kind comes back and behaves as before; what cannot come back is refused with its reason.

mod common;

use std::io::{Seek, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use common::*;
use kioku_run::fds::{self, NoCtx, ObjectImage};
use kioku_run::RunError;

#[test]
fn files_pipes_and_shared_descriptions_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, b"0123456789").unwrap();
    let a = Child::spawn();
    let b = Child::spawn();
    // A file open for appending, read to offset 4, shared by both processes and dup'ed in one.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(&path)
        .unwrap();
    f.seek(std::io::SeekFrom::Start(4)).unwrap();
    a.share(f.as_fd(), 5);
    a.share(f.as_fd(), 9);
    b.give(OwnedFd::from(f), 6);
    a.give(std::fs::File::open(dir.path()).unwrap(), 7);
    a.give(std::fs::File::open("/dev/null").unwrap(), 8);
    // A pipe with unread bytes: read end in a, write end in both.
    let (r, w) = pipe();
    write_all(w.as_fd(), b"in flight");
    a.give(r, 10);
    a.share(w.as_fd(), 11);
    b.give(w, 12);
    // fd 9 keeps close-on-exec.
    a.sys(
        libc::SYS_fcntl,
        &[9, libc::F_SETFD as u64, libc::FD_CLOEXEC as u64],
    );

    let t = capture(&[&a, &b]);
    assert_eq!(t.pipes.len(), 1);
    assert_eq!(t.pipes[0].data, b"in flight");
    let files = t
        .objects
        .iter()
        .filter(|o| matches!(o, ObjectImage::File(_)))
        .count();
    assert_eq!(files, 2, "one description for the shared file, one directory");
    drop((a, b));

    let k = restore(&t, 2);
    let (a, b) = (&k[0], &k[1]);
    assert!(same(a.pid(), 5, b.pid(), 6), "the file's description is shared again");
    assert!(same(a.pid(), 5, a.pid(), 9));
    assert!(cloexec(a, 9) && !cloexec(a, 5));
    let f = a.take(5);
    assert_eq!(getfl(f.as_fd()) & libc::O_APPEND, libc::O_APPEND);
    // SAFETY: lseek on our descriptor.
    assert_eq!(unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_CUR) }, 4);
    assert_eq!(read_some(f.as_fd(), 3).unwrap(), b"456");
    let mut file = std::fs::File::from(b.take(6));
    file.write_all(b"!").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"0123456789!");
    assert!(std::fs::read_link(format!("/proc/{}/fd/7", a.pid())).unwrap() == dir.path());
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/fd/8", a.pid())).unwrap(),
        std::path::Path::new("/dev/null")
    );
    // The pipe: its unread bytes, then what is written after; both write ends are one pipe.
    let r = a.take(10);
    write_all(b.take(12).as_fd(), b" and more");
    assert_eq!(read_some(r.as_fd(), 100).unwrap(), b"in flight and more");
    assert!(same(a.pid(), 11, b.pid(), 12));
    // O_NONBLOCK set through one holder is seen by the other (one description).
    // SAFETY: fcntl on our descriptor.
    unsafe { libc::fcntl(a.take(11).as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
    assert_ne!(getfl(b.take(12).as_fd()) & libc::O_NONBLOCK, 0);
}

#[test]
fn a_pipe_leading_out_of_the_tree_is_refused_above_the_standard_streams() {
    let a = Child::spawn();
    let (r, _w) = pipe();
    a.give(r, 4);
    let e = fds::capture(&refs(&[&a]), &mut NoCtx).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, RunError::Unsupported { .. }), "{msg}");
    assert!(msg.contains("descriptor 4") && msg.contains("other end is outside the tree"), "{msg}");
    // At a standard stream it is the restoring command's own.
    let b = Child::spawn();
    let (_r, w) = pipe();
    b.give(w, 1);
    let t = capture(&[&b]);
    let one = t.procs[&100].iter().find(|f| f.fd == 1).unwrap();
    assert_eq!(t.objects[one.object], ObjectImage::Inherited { stdio: 1 });
}

fn eventfd(init: u32, flags: i32) -> OwnedFd {
    // SAFETY: plain system call.
    owned(unsafe { libc::eventfd(init, libc::EFD_CLOEXEC | flags) })
}

fn read_u64(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<u64> {
    let b = read_some(fd, 8)?;
    Ok(u64::from_ne_bytes(b.try_into().unwrap()))
}

#[test]
fn eventfd_timerfd_and_signalfd_come_back() {
    let a = Child::spawn();
    a.give(eventfd(7, libc::EFD_NONBLOCK), 3);
    a.give(eventfd(3, libc::EFD_SEMAPHORE | libc::EFD_NONBLOCK), 4);
    // A timerfd that expired three times (unread), armed again with a 300 ms interval.
    // SAFETY: plain system call.
    let tfd = owned(unsafe {
        libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
    });
    let spec = |v_ns: i64, i_ns: i64| libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: i_ns / 1_000_000_000,
            tv_nsec: i_ns % 1_000_000_000,
        },
        it_value: libc::timespec {
            tv_sec: v_ns / 1_000_000_000,
            tv_nsec: v_ns % 1_000_000_000,
        },
    };
    // SAFETY: the kernel reads one itimerspec.
    unsafe { libc::timerfd_settime(tfd.as_raw_fd(), 0, &spec(1_000_000, 1_000_000), std::ptr::null_mut()) };
    std::thread::sleep(std::time::Duration::from_millis(20));
    // SAFETY: as above: now 3 s until the next expiration, 300 ms between them.
    unsafe { libc::timerfd_settime(tfd.as_raw_fd(), 0, &spec(3_000_000_000, 300_000_000), std::ptr::null_mut()) };
    a.give(tfd, 5);
    // A signalfd for SIGUSR1.
    let mask: u64 = 1 << (libc::SIGUSR1 - 1);
    // SAFETY: the kernel reads 8 bytes of signal set.
    let sfd = owned(unsafe {
        libc::syscall(libc::SYS_signalfd4, -1, &mask as *const u64, 8, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) as i32
    });
    a.give(sfd, 6);

    let t = capture(&[&a]);
    let tf = t
        .objects
        .iter()
        .find_map(|o| match o {
            ObjectImage::TimerFd(x) => Some(x.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(tf.ticks, 0, "re-arming reset the expirations");
    drop(a);
    let k = restore(&t, 1);
    let a = &k[0];
    assert_eq!(read_u64(a.take(3).as_fd()).unwrap(), 7);
    let sem = a.take(4);
    for _ in 0..3 {
        assert_eq!(read_u64(sem.as_fd()).unwrap(), 1);
    }
    assert!(read_u64(sem.as_fd()).is_err(), "a semaphore counted 3 gives 3");
    let tfd = a.take(5);
    let mut cur: libc::itimerspec = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes one itimerspec.
    unsafe { libc::timerfd_gettime(tfd.as_raw_fd(), &mut cur) };
    let left = cur.it_value.tv_sec as i64 * 1_000_000_000 + cur.it_value.tv_nsec as i64;
    assert!(left > 2_000_000_000 && left <= 3_000_000_000, "{left} ns left");
    assert_eq!(cur.it_interval.tv_nsec, 300_000_000);
    assert_ne!(getfl(tfd.as_fd()) & libc::O_NONBLOCK, 0);
    // The signalfd reads SIGUSR1 sent to the restored process (blocked there, as the
    // program's signal mask would be).
    let set = mask.to_ne_bytes();
    a.sys_mem(libc::SYS_rt_sigprocmask, &[libc::SIG_BLOCK as u64, u64::MAX, 0, 8], &set);
    // SAFETY: plain system call.
    unsafe { libc::kill(a.pid(), libc::SIGUSR1) };
    let (n, info) = a.sys_mem(libc::SYS_read, &[6, u64::MAX, 128], &[0u8; 128]);
    assert_eq!(n, 128);
    assert_eq!(u32::from_ne_bytes(info[..4].try_into().unwrap()), libc::SIGUSR1 as u32);
}

#[test]
fn timerfd_expirations_not_read_come_back() {
    let a = Child::spawn();
    // SAFETY: plain system call.
    let tfd = owned(unsafe {
        libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
    });
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 },
    };
    // SAFETY: the kernel reads one itimerspec.
    unsafe { libc::timerfd_settime(tfd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    std::thread::sleep(std::time::Duration::from_millis(10));
    a.give(tfd, 3);
    let t = capture(&[&a]);
    drop(a);
    let k = restore(&t, 1);
    assert_eq!(read_u64(k[0].take(3).as_fd()).unwrap(), 1, "the expiration nobody read");
    assert!(read_u64(k[0].take(3).as_fd()).is_err());
}

#[test]
fn epoll_sets_fire_the_same_events_with_the_same_data() {
    let a = Child::spawn();
    let (r, w) = pipe();
    write_all(w.as_fd(), b"x");
    a.give(r, 3);
    a.give(w, 4);
    a.give(eventfd(1, libc::EFD_NONBLOCK), 5);
    // SAFETY: plain system call.
    a.give(owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }), 6);
    let ev = |events: u32, data: u64| {
        let mut b = events.to_ne_bytes().to_vec();
        b.extend_from_slice(&data.to_ne_bytes());
        b
    };
    let add = |fd: u64, events: u32, data: u64| {
        let (r, _) = a.sys_mem(
            libc::SYS_epoll_ctl,
            &[6, libc::EPOLL_CTL_ADD as u64, fd, u64::MAX],
            &ev(events, data),
        );
        assert_eq!(r, 0);
    };
    add(3, libc::EPOLLIN as u32, 0xdead);
    add(5, (libc::EPOLLIN | libc::EPOLLET) as u32, 0xbeef);
    add(4, libc::EPOLLOUT as u32, 0x4444);
    // A registration whose number was closed afterwards (its file lives on at 8): the kernel
    // keeps it under number 7.
    a.give(eventfd(2, libc::EFD_NONBLOCK), 7);
    add(7, libc::EPOLLIN as u32, 0x7777);
    a.sys(libc::SYS_dup2, &[7, 8]);
    a.sys(libc::SYS_close, &[7]);

    let t = capture(&[&a]);
    drop(a);
    let k = restore(&t, 1);
    let a = &k[0];
    let ep = a.take(6);
    let mut got = [libc::epoll_event { events: 0, u64: 0 }; 8];
    // SAFETY: the kernel writes at most 8 events.
    let n = unsafe { libc::epoll_wait(ep.as_raw_fd(), got.as_mut_ptr(), 8, 1000) };
    let mut seen: Vec<(u32, u64)> = got[..n as usize].iter().map(|e| (e.events, e.u64)).collect();
    seen.sort_by_key(|x| x.1);
    assert_eq!(
        seen,
        vec![
            (libc::EPOLLOUT as u32, 0x4444),
            (libc::EPOLLIN as u32, 0x7777),
            (libc::EPOLLIN as u32, 0xbeef),
            (libc::EPOLLIN as u32, 0xdead)
        ]
    );
    // Edge-triggered: reported once; level-triggered: again.
    // SAFETY: as above.
    let n = unsafe { libc::epoll_wait(ep.as_raw_fd(), got.as_mut_ptr(), 8, 0) };
    assert_eq!(n, 3);
    // The items are keyed by the program's own numbers: it can delete them by number.
    let (r, _) = a.sys_mem(libc::SYS_epoll_ctl, &[6, libc::EPOLL_CTL_DEL as u64, 3, u64::MAX], &ev(0, 0));
    assert_eq!(r, 0, "EPOLL_CTL_DEL by the program's number");
    assert_eq!(std::fs::read_link(format!("/proc/{}/fd/7", a.pid())).ok(), None, "7 is closed again");
    assert!(same(a.pid(), 8, a.pid(), 8));
}

#[test]
fn fanotify_is_refused() {
    let a = Child::spawn();
    // SAFETY: plain system call (needs CAP_SYS_ADMIN).
    let fd = unsafe { libc::fanotify_init(libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC, libc::O_RDONLY as u32) };
    if fd < 0 {
        eprintln!("SKIPPED: fanotify_init failed ({}); needs CAP_SYS_ADMIN", std::io::Error::last_os_error());
        return;
    }
    a.give(owned(fd), 3);
    let e = fds::capture(&refs(&[&a]), &mut NoCtx).unwrap_err().to_string();
    assert!(e.contains("descriptor 3") && e.contains("fanotify"), "{e}");
}
