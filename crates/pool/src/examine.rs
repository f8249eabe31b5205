//! Reading a pool's metadata and deciding which commit is live — without trusting it.
//!
//! `Pool::open` and `kioku pool inspect` share this: open turns problems into errors, inspect
//! reports them all. Reads go through a caller-supplied function, so inspect can use `pread`
//! on a file that may be truncated, and open can read its mapping.

use crate::format::{self, Header, HeaderProblem, Section, Slot, SlotProblem};
use serde::Serialize;

/// What one commit slot holds, or why it cannot be used.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum SlotState {
    /// Checksums verify and the section table is consistent.
    Intact { slot: Slot, sections: Vec<Section> },
    /// Never written.
    Empty,
    /// Slot checksum or fields bad (a torn or damaged slot).
    Damaged { detail: String },
    /// The slot verifies but its section table does not.
    TableDamaged { slot: Slot, detail: String },
    /// The slot verifies but needs a longer file than there is.
    Truncated { slot: Slot, file_len: u64 },
}

impl SlotState {
    /// The slot's epoch when its record is readable.
    pub fn epoch(&self) -> Option<u64> {
        match self {
            SlotState::Intact { slot, .. }
            | SlotState::TableDamaged { slot, .. }
            | SlotState::Truncated { slot, .. } => Some(slot.epoch),
            _ => None,
        }
    }

    /// A one-line description of why this slot cannot be used.
    pub fn problem(&self) -> Option<String> {
        match self {
            SlotState::Intact { .. } => None,
            SlotState::Empty => Some("empty (never written)".into()),
            SlotState::Damaged { detail } | SlotState::TableDamaged { detail, .. } => {
                Some(detail.clone())
            }
            SlotState::Truncated { slot, file_len } => Some(format!(
                "needs a {}-byte file, the file has {file_len} bytes",
                slot.pool_len
            )),
        }
    }
}

/// Which commit to use.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum Verdict {
    /// The live slot is intact.
    Healthy { live: usize },
    /// The live slot is damaged but the other one is intact (an older commit).
    RollbackAvailable {
        damaged: usize,
        detail: String,
        previous: usize,
        previous_epoch: u64,
    },
    /// The live commit needs more file than exists.
    Truncated { needed: u64, found: u64 },
    /// No usable commit.
    CommitDamaged { detail: String },
    /// The header itself is unusable; nothing else was read.
    BadHeader,
}

/// Everything learnt from a pool file's metadata.
#[derive(Clone, Debug)]
pub struct Examination {
    pub file_len: u64,
    pub header: Result<Header, HeaderProblem>,
    /// Raw value of the live index, when the file is long enough to hold it.
    pub index: Option<u64>,
    pub slots: Vec<SlotState>,
    pub verdict: Verdict,
}

/// Examines a pool of `file_len` bytes whose bytes `read(off, len)` returns (fewer bytes
/// than asked only past the end of the file).
pub fn examine(file_len: u64, read: &mut dyn FnMut(u64, usize) -> Vec<u8>) -> Examination {
    let head = read(0, format::HEADER_LEN);
    let header = Header::decode(&head);
    let Ok(h) = &header else {
        return Examination {
            file_len,
            header,
            index: None,
            slots: vec![],
            verdict: Verdict::BadHeader,
        };
    };
    if file_len < h.data_off {
        let verdict = Verdict::Truncated {
            needed: h.data_off,
            found: file_len,
        };
        return Examination {
            file_len,
            header,
            index: None,
            slots: vec![],
            verdict,
        };
    }
    let index = u64::from_le_bytes(read(format::INDEX_OFF, 8).try_into().expect("8 bytes"));
    let slots: Vec<SlotState> = (0..2)
        .map(|i| {
            let raw = read(format::slot_off(i), format::SLOT_LEN);
            match Slot::decode(&raw) {
                Err(SlotProblem::Empty) => SlotState::Empty,
                Err(SlotProblem::Checksum { stored, computed }) => SlotState::Damaged {
                    detail: format!(
                        "slot checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
                    ),
                },
                Err(SlotProblem::Invalid { what }) => SlotState::Damaged {
                    detail: format!("slot field invalid: {what}"),
                },
                Ok(slot) if slot.pool_len > file_len => SlotState::Truncated { slot, file_len },
                Ok(slot) => {
                    let table = read(format::TABLE_OFF[i], format::TABLE_LEN);
                    match format::decode_table(&table, &slot, h) {
                        Ok(sections) => SlotState::Intact { slot, sections },
                        Err(detail) => SlotState::TableDamaged { slot, detail },
                    }
                }
            }
        })
        .collect();
    let verdict = decide(index, &slots);
    Examination {
        file_len,
        header,
        index: Some(index),
        slots,
        verdict,
    }
}

fn decide(index: u64, slots: &[SlotState]) -> Verdict {
    if index > 1 {
        return Verdict::CommitDamaged {
            detail: format!("live index holds {index}, not 0 or 1"),
        };
    }
    let live = index as usize;
    let other = 1 - live;
    match &slots[live] {
        SlotState::Intact { .. } => Verdict::Healthy { live },
        SlotState::Truncated { slot, file_len } => Verdict::Truncated {
            needed: slot.pool_len,
            found: *file_len,
        },
        damaged => {
            let detail = format!(
                "live slot {live}: {}",
                damaged.problem().unwrap_or_default()
            );
            match &slots[other] {
                SlotState::Intact { slot, .. } => Verdict::RollbackAvailable {
                    damaged: live,
                    detail,
                    previous: other,
                    previous_epoch: slot.epoch,
                },
                o => Verdict::CommitDamaged {
                    detail: format!(
                        "{detail}; slot {other}: {}",
                        o.problem().unwrap_or_default()
                    ),
                },
            }
        }
    }
}
