//! Asking a running monitor for a checkpoint (`kioku checkpoint`): a Unix stream socket in the
//! abstract namespace (no file to clean up after a crash), named after the program's pid, the
//! monitor's pid, and the pool file (device and inode). One request per connection: the line
//! `checkpoint`; the answer, once the checkpoint is durable, is one line of JSON (`{"epoch":…}`)
//! or `error: …`.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use crate::error::{Result, RunError};

fn pid_name(pid: i32) -> String {
    format!("kioku/pid/{pid}")
}

fn pool_name(path: &Path) -> Result<String> {
    let md =
        std::fs::metadata(path).map_err(|e| RunError::io(format!("stat {}", path.display()), e))?;
    Ok(format!("kioku/pool/{}:{}", md.dev(), md.ino()))
}

fn bind(name: &str) -> Result<UnixListener> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| RunError::io("control socket name", e))?;
    let l = UnixListener::bind_addr(&addr)
        .map_err(|e| RunError::io(format!("binding control socket @{name}"), e))?;
    l.set_nonblocking(true)
        .map_err(|e| RunError::io("control socket", e))?;
    Ok(l)
}

/// The monitor's side.
pub struct Control {
    listeners: Vec<UnixListener>,
}

/// A request waiting for its checkpoint.
pub struct Request {
    stream: UnixStream,
}

impl Request {
    /// Sends the answer (best effort: the requester may have gone).
    pub fn answer(mut self, line: &str) {
        let _ = self.stream.write_all(line.as_bytes());
        let _ = self.stream.write_all(b"\n");
    }
}

impl Control {
    /// Listens under the names of the program, the monitor, the pool, and `more` pids (the
    /// tree's namespace init: a user may pick any of them from a process list).
    pub fn listen(program_pid: i32, pool: &Path, more: &[i32]) -> Result<Control> {
        let mut listeners = vec![bind(&pid_name(program_pid))?, bind(&pool_name(pool)?)?];
        let me = std::process::id() as i32;
        let mut pids = vec![me];
        pids.extend_from_slice(more);
        pids.retain(|&p| p != program_pid && p > 0);
        pids.dedup();
        for p in pids {
            listeners.push(bind(&pid_name(p))?);
        }
        Ok(Control { listeners })
    }

    /// Checkpoint requests that arrived (never blocks).
    pub fn poll(&self) -> Vec<Request> {
        let mut out = Vec::new();
        for l in &self.listeners {
            while let Ok((stream, _)) = l.accept() {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                let mut line = String::new();
                let mut r = BufReader::new(&stream);
                if r.read_line(&mut line).is_ok() && line.trim() == "checkpoint" {
                    out.push(Request { stream });
                } else {
                    let mut s = stream;
                    let _ = s.write_all(b"error: unknown request\n");
                }
            }
        }
        out
    }
}

/// Whom to ask.
pub enum Target<'a> {
    Pid(i32),
    Pool(&'a Path),
}

/// Asks the monitor of `target` for a checkpoint and waits until it is durable; returns the
/// monitor's JSON answer.
pub fn request_checkpoint(target: Target<'_>, timeout: Duration) -> Result<String> {
    let name = match target {
        Target::Pid(p) => pid_name(p),
        Target::Pool(p) => pool_name(p)?,
    };
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| RunError::io("control socket name", e))?;
    let mut s = UnixStream::connect_addr(&addr).map_err(|e| {
        RunError::io(
            "no kioku monitor answers for that process or pool (is it running under `kioku run` or `kioku restore`?)",
            e,
        )
    })?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| RunError::io("control socket", e))?;
    s.write_all(b"checkpoint\n")
        .map_err(|e| RunError::io("sending the request", e))?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| RunError::io("waiting for the checkpoint", e))?;
    let line = line.trim().to_string();
    if line.is_empty() {
        return Err(RunError::io(
            "the monitor closed the connection without answering (the program may have ended)",
            std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
        ));
    }
    if let Some(e) = line.strip_prefix("error: ") {
        return Err(RunError::Unsupported {
            what: e.to_string(),
        });
    }
    Ok(line)
}
