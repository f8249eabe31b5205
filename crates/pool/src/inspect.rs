//! `kioku pool inspect`: everything about a pool file, damage included, without changing it.

use crate::examine::{examine, SlotState, Verdict};
use crate::format::{Header, HeaderProblem};
use crate::lock::holder_pid;
use crate::media::MediumKind;
use crate::pool::{header_error, read_at};
use serde::Serialize;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

/// A pool file's state, for people (`Display`) and programs (`serde`).
#[derive(Debug, Serialize)]
pub struct Report {
    pub path: PathBuf,
    pub file_len: u64,
    /// Process holding the pool open (it may change the pool while this report is made).
    pub held_by: Option<u32>,
    pub header: Option<HeaderReport>,
    /// The header problem, when the header is unusable.
    pub header_problem: Option<String>,
    pub live_index: Option<u64>,
    pub slots: Vec<SlotReport>,
    pub verdict: Verdict,
    /// One line: healthy, or what is wrong and what to do.
    pub summary: String,
}

#[derive(Debug, Serialize)]
pub struct HeaderReport {
    pub version: u32,
    pub uuid: String,
    pub page_size: u32,
    pub kind: String,
    pub created_medium: String,
    pub created_unix_ns: u64,
    pub data_off: u64,
}

#[derive(Debug, Serialize)]
pub struct SlotReport {
    pub slot: usize,
    /// "live", "previous", or unusable.
    pub role: &'static str,
    #[serde(flatten)]
    pub state: SlotState,
}

impl HeaderReport {
    fn new(h: &Header) -> Self {
        HeaderReport {
            version: h.version,
            uuid: h.uuid_string(),
            page_size: h.page_size,
            kind: h.kind.clone(),
            created_medium: MediumKind::from_code(h.created_medium)
                .map(|k| k.name().to_string())
                .unwrap_or_else(|| format!("unknown ({})", h.created_medium)),
            created_unix_ns: h.created_unix_ns,
            data_off: h.data_off,
        }
    }
}

/// Reads a pool file and reports what it holds and what is wrong with it. Fails only when the
/// file cannot be read at all.
pub fn inspect(path: &Path) -> std::io::Result<Report> {
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let ex = examine(file_len, &mut |off, len| read_at(&file, off, len));
    let held_by = holder_pid(&file);
    let live = match &ex.verdict {
        Verdict::Healthy { live } => Some(*live),
        _ => None,
    };
    let slots = ex
        .slots
        .into_iter()
        .enumerate()
        .map(|(i, state)| {
            let role = match (&state, live) {
                (SlotState::Intact { .. }, Some(l)) if l == i => "live",
                (SlotState::Intact { .. }, _) => "previous",
                _ => "unusable",
            };
            SlotReport {
                slot: i,
                role,
                state,
            }
        })
        .collect();
    let (header, header_problem) = match &ex.header {
        Ok(h) => (Some(HeaderReport::new(h)), None),
        Err(p) => (
            None,
            Some(header_error(path, p.clone(), file_len).to_string()),
        ),
    };
    let summary = match (&ex.verdict, &ex.header) {
        (_, Err(HeaderProblem::NotAPool)) => "not a kioku pool".to_string(),
        (Verdict::BadHeader, _) => header_problem.clone().unwrap_or_default(),
        (Verdict::Healthy { .. }, _) => "healthy".to_string(),
        (Verdict::RollbackAvailable { detail, previous_epoch, .. }, _) => format!(
            "DAMAGED: {detail}; the previous commit (epoch {previous_epoch}) is intact — reopen allowing rollback (losing the damaged commit) to use it"
        ),
        (Verdict::Truncated { needed, found }, _) => format!(
            "TRUNCATED: the live commit needs {needed} bytes, the file has {found}; restore the file from a copy"
        ),
        (Verdict::CommitDamaged { detail }, _) => {
            format!("DAMAGED: {detail}; no intact commit is left — restore the file from a copy")
        }
    };
    Ok(Report {
        path: path.into(),
        file_len,
        held_by,
        header,
        header_problem,
        live_index: ex.index,
        slots,
        verdict: ex.verdict,
        summary,
    })
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "pool      {}", self.path.display())?;
        writeln!(f, "file      {} bytes", self.file_len)?;
        if let Some(pid) = self.held_by {
            writeln!(f, "held by   process {pid} (values may change while read)")?;
        }
        if let Some(h) = &self.header {
            writeln!(f, "format    version {}", h.version)?;
            writeln!(f, "uuid      {}", h.uuid)?;
            writeln!(f, "kind      {}", h.kind)?;
            writeln!(f, "page size {}", h.page_size)?;
            writeln!(
                f,
                "created   on {} at {}",
                h.created_medium,
                format_ns(h.created_unix_ns)
            )?;
            writeln!(f, "data at   {}", h.data_off)?;
        }
        if let Some(i) = self.live_index {
            writeln!(f, "index     {i}")?;
        }
        for s in &self.slots {
            match &s.state {
                SlotState::Intact { slot, sections } => {
                    writeln!(
                        f,
                        "slot {}    {}: epoch {}, committed {}, pool length {}, roots {:?}",
                        s.slot,
                        s.role,
                        slot.epoch,
                        format_ns(slot.committed_unix_ns),
                        slot.pool_len,
                        slot.roots
                    )?;
                    for sec in sections {
                        writeln!(
                            f,
                            "            section {:<24} offset {:>12}  length {:>12}  flags {:#x}",
                            sec.name, sec.offset, sec.len, sec.flags
                        )?;
                    }
                }
                other => writeln!(
                    f,
                    "slot {}    {}{}: {}",
                    s.slot,
                    s.role,
                    other
                        .epoch()
                        .map(|e| format!(" (epoch {e})"))
                        .unwrap_or_default(),
                    other.problem().unwrap_or_default()
                )?,
            }
        }
        write!(f, "status    {}", self.summary)
    }
}

fn format_ns(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs / 86400, secs % 86400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
