//! `/proc/<pid>/stat` and `/proc/<pid>/task/<tid>/stat`: a task's state and its numbered
//! fields, as proc(5) numbers them (1 is the pid, 2 the command name, 3 the state, 4 the
//! parent …).
//!
//! The command name (field 2) may hold spaces and parentheses, so the fields are counted from
//! the *last* `)`. Here because every crate that reads the file (the pool's lock, the process
//! control, the process checkpoints) already depends on this one.

use std::path::Path;
use std::str::FromStr;

/// One reading of a task's `stat` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// What follows the command name's closing `)`: field 3 onwards (empty if there is none).
    rest: String,
}

impl ProcStat {
    /// The fields of a `stat` file's text. Never fails: a text without the command name's
    /// `)` has no fields.
    pub fn parse(text: &str) -> ProcStat {
        let rest = text.rsplit_once(')').map_or("", |(_, rest)| rest);
        ProcStat {
            rest: rest.to_string(),
        }
    }

    /// Reads and parses the `stat` file at `path` (`/proc/<pid>/stat`, or a task's).
    pub fn read(path: impl AsRef<Path>) -> std::io::Result<ProcStat> {
        Ok(ProcStat::parse(&std::fs::read_to_string(path)?))
    }

    /// Reads `/proc/<pid>/stat`.
    pub fn of(pid: i64) -> std::io::Result<ProcStat> {
        ProcStat::read(format!("/proc/{pid}/stat"))
    }

    /// Field `n` (numbered as in proc(5); only 3 onwards, the ones after the command name).
    pub fn field(&self, n: usize) -> Option<&str> {
        self.rest.split_whitespace().nth(n.checked_sub(3)?)
    }

    /// Field `n` as a number (`None` if it is missing or not a `T`).
    pub fn number<T: FromStr>(&self, n: usize) -> Option<T> {
        self.field(n)?.parse().ok()
    }

    /// The state letter (field 3): `R`, `S`, `D`, `T`, `t`, `Z`, `X` ….
    pub fn state(&self) -> Option<char> {
        self.field(3)?.chars().next()
    }

    /// Whether the task has exited: a zombie (`Z`) or dead (`X`).
    pub fn has_exited(&self) -> bool {
        matches!(self.state(), Some('Z') | Some('X'))
    }
}

/// Whether the task whose `stat` file is `path` exists and has not exited (not a zombie, not
/// dead); a file that cannot be read or has no state says it does not.
pub fn is_running(path: impl AsRef<Path>) -> bool {
    ProcStat::read(path).is_ok_and(|s| s.state().is_some() && !s.has_exited())
}

/// Whether process `pid` exists and has not exited ([`is_running`] of `/proc/<pid>/stat`).
pub fn pid_is_running(pid: i64) -> bool {
    is_running(format!("/proc/{pid}/stat"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_from_the_last_parenthesis() {
        let s = ProcStat::parse("42 (a) b (c)) S 7 42 42 0 -1 4194560 19 0");
        assert_eq!(s.state(), Some('S'));
        assert_eq!(s.number::<i32>(4), Some(7));
        assert_eq!(s.field(8), Some("-1"));
        assert_eq!(s.number::<i64>(8), Some(-1));
        assert_eq!(s.number::<u64>(8), None);
        assert_eq!(s.field(2), None);
        assert_eq!(s.field(99), None);
        assert!(!s.has_exited());
    }

    #[test]
    fn zombies_and_dead_tasks_have_exited() {
        assert!(ProcStat::parse("1 (x) Z 0").has_exited());
        assert!(ProcStat::parse("1 (x) X 0").has_exited());
        assert!(!ProcStat::parse("1 (x) t 0").has_exited());
    }

    #[test]
    fn a_text_without_the_name_has_no_fields() {
        let s = ProcStat::parse("garbage");
        assert_eq!(s.state(), None);
        assert_eq!(s.field(3), None);
        assert!(!s.has_exited());
    }

    #[test]
    fn this_process_runs_and_a_missing_one_does_not() {
        // This thread is running while it reads its own file.
        let me = ProcStat::read("/proc/thread-self/stat").unwrap();
        assert_eq!(me.state(), Some('R'));
        assert_eq!(
            me.number::<u32>(4),
            Some(std::os::unix::process::parent_id())
        );
        assert!(pid_is_running(std::process::id().into()));
        // Beyond the largest pid_max (2^22).
        assert!(!pid_is_running(1 << 23));
        assert!(!is_running("/proc/self/no-such-file"));
    }
}
