//! What a checkpoint pool holds, read without opening (or locking) it: both contexts, the valid
//! index, epochs, regions and sizes — for `kioku pool inspect`.

use crate::engine::{meta_name, root, section_name, POOL_KIND};
use crate::meta::{ContextMeta, RegionRecord};
use kioku_pool::examine::SlotState;
use kioku_pool::inspect::Report;
use serde::Serialize;
use std::fmt;
use std::os::unix::fs::FileExt;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct CkptReport {
    pub valid_ctx: usize,
    pub running_ctx: usize,
    /// Last checkpoint (0: none yet).
    pub epoch: u64,
    pub checkpoint_unix_ns: u64,
    pub contexts: Vec<ContextReport>,
    /// The caller metadata of the valid context, when its checksum matches (for programs
    /// that interpret it, e.g. `kioku inspect`).
    #[serde(skip)]
    pub metadata: Option<Vec<u8>>,
}

#[derive(Debug, Serialize)]
pub struct ContextReport {
    pub ctx: usize,
    /// "valid" (restorable), or "running" (the program's, changed since the checkpoint).
    pub role: &'static str,
    /// Whether its metadata has the committed checksum (the valid one must).
    pub metadata_ok: bool,
    pub epoch: Option<u64>,
    pub metadata_bytes: Option<u64>,
    pub regions: Vec<RegionReport>,
}

#[derive(Debug, Serialize)]
pub struct RegionReport {
    #[serde(flatten)]
    pub record: RegionRecord,
    pub pool_offset: Option<u64>,
}

/// Reads the checkpoint state of the pool `report` describes; `None` for pools of other kinds
/// or without a usable commit.
pub fn inspect(path: &Path, report: &Report) -> std::io::Result<Option<CkptReport>> {
    if report.header.as_ref().map(|h| h.kind.as_str()) != Some(POOL_KIND) {
        return Ok(None);
    }
    let Some(live) = report.slots.iter().find(|s| s.role == "live") else {
        return Ok(None);
    };
    let SlotState::Intact { slot, sections } = &live.state else {
        return Ok(None);
    };
    let r = &slot.roots;
    if r.len() != root::COUNT && r.len() != root::COUNT_V1 {
        return Ok(None);
    }
    // Roots come from the file: a context index other than 0 or 1 is damage, not a context.
    let (valid, running) = match (r[root::VALID], r[root::RUNNING]) {
        (v @ 0..=1, c @ 0..=1) => (v as usize, c as usize),
        _ => return Ok(None),
    };
    let file = std::fs::File::open(path)?;
    let mut contexts = Vec::new();
    let mut metadata = None;
    for ctx in [valid, 1 - valid] {
        let meta = sections.iter().find(|s| s.name == meta_name(ctx));
        // The length is checked against the section before anything is allocated for it.
        let mut bytes = Vec::new();
        let ok = match meta {
            Some(s) if s.len >= r[root::META_LEN] => {
                bytes.resize(r[root::META_LEN] as usize, 0);
                file.read_exact_at(&mut bytes, s.offset)?;
                crc32c::crc32c(&bytes) as u64 == r[root::META_CRC]
            }
            _ => false,
        };
        let decoded = if ok {
            ContextMeta::decode(&bytes).ok()
        } else {
            None
        };
        if ctx == valid {
            metadata = decoded.as_ref().map(|m| m.user.clone());
        }
        let regions = decoded
            .as_ref()
            .map(|m| {
                m.regions
                    .iter()
                    .map(|rec| RegionReport {
                        record: rec.clone(),
                        pool_offset: sections
                            .iter()
                            .find(|s| s.name == section_name(rec.id, ctx))
                            .map(|s| s.offset),
                    })
                    .collect()
            })
            .unwrap_or_default();
        contexts.push(ContextReport {
            ctx,
            role: if ctx == valid {
                "valid"
            } else if ctx == running {
                "running"
            } else {
                "copy"
            },
            metadata_ok: ok,
            epoch: decoded.as_ref().map(|m| m.epoch),
            metadata_bytes: decoded.as_ref().map(|m| m.user.len() as u64),
            regions,
        });
    }
    Ok(Some(CkptReport {
        valid_ctx: valid,
        running_ctx: running,
        epoch: r[root::EPOCH],
        checkpoint_unix_ns: r[root::TIME],
        contexts,
        metadata,
    }))
}

impl fmt::Display for CkptReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checkpoint epoch {} (valid context {}, program runs on context {})",
            self.epoch, self.valid_ctx, self.running_ctx
        )?;
        for c in &self.contexts {
            write!(f, "ctx {}     {}", c.ctx, c.role)?;
            if !c.metadata_ok {
                writeln!(f, ": metadata does not match the committed checksum (changed since the checkpoint)")?;
                continue;
            }
            let total: u64 = c.regions.iter().map(|r| r.record.len).sum();
            writeln!(
                f,
                ": epoch {}, {} regions, {} bytes, {} bytes of caller metadata",
                c.epoch.unwrap_or(0),
                c.regions.len(),
                total,
                c.metadata_bytes.unwrap_or(0)
            )?;
            for r in &c.regions {
                writeln!(
                    f,
                    "            region {:<20} at {:#014x}  length {:>12}  reserved {:>12}  pool offset {}",
                    r.record.name,
                    r.record.addr,
                    r.record.len,
                    r.record.reserve,
                    r.pool_offset.map(|o| o.to_string()).unwrap_or_else(|| "missing".into())
                )?;
            }
        }
        Ok(())
    }
}
