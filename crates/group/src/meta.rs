//! What a rank's checkpoint records besides its regions (the engine's caller metadata), and
//! the table that maps a rank's regions into its data space.

use serde::{Deserialize, Serialize};

pub const MAGIC: &str = "kioku.group";
/// 2: parity, journals and the level record moved out of the engine's regions into the
/// library's own sections (one copy each).
pub const VERSION: u32 = 2;

/// One protected region: `kioku_group_alloc(id, size)`, placed at `offset` pages of the rank's data
/// space (offsets never move, so a new region adds pages at the end and no delta elsewhere).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionEntry {
    pub id: u32,
    pub offset: u64,
    pub pages: u64,
    pub bytes: u64,
}

/// The data space of one rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub regions: Vec<RegionEntry>,
}

impl Table {
    /// Pages of the data space.
    pub fn pages(&self) -> u64 {
        self.regions
            .iter()
            .map(|r| r.offset + r.pages)
            .max()
            .unwrap_or(0)
    }

    /// The region holding data page `p`, and the page's index in it.
    pub fn locate(&self, p: u64) -> Option<(&RegionEntry, u64)> {
        let i = self.regions.partition_point(|r| r.offset + r.pages <= p);
        self.regions
            .get(i)
            .filter(|r| r.offset <= p)
            .map(|r| (r, p - r.offset))
    }

    pub fn get(&self, id: u32) -> Option<&RegionEntry> {
        self.regions.iter().find(|r| r.id == id)
    }

    /// Adds region `id` of `bytes` (`pages` pages) at the end.
    pub fn add(&mut self, id: u32, bytes: u64, pages: u64) -> RegionEntry {
        let e = RegionEntry {
            id,
            offset: self.pages(),
            pages,
            bytes,
        };
        self.regions.push(e.clone());
        e
    }
}

/// Caller metadata of every checkpoint of a group pool (the engine commits it with the
/// checkpoint, in both contexts). What each level's parity encodes is in the pool's record
/// ([`crate::store::Record`]), which changes between checkpoints when flights commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMeta {
    pub magic: String,
    pub version: u32,
    /// Ranks of the job and this pool's rank.
    pub ranks: usize,
    pub rank: usize,
    /// The group checkpoint this is (1, 2, …), the same on every rank.
    pub epoch: u64,
    /// Level of this checkpoint: 1 local, 2 partner, 3 rs.
    pub level: u8,
    /// Members of this rank's group (world ranks, position order) and their tables, so that a
    /// lost member's layout is known to the others.
    pub members: Vec<usize>,
    pub tables: Vec<Table>,
    /// The configuration the parity was made with.
    pub group_size: usize,
    pub parity: usize,
    pub partner: bool,
    pub rs: bool,
    /// The journals' valid entries as of this checkpoint (levels with parity only).
    pub journals: Vec<crate::store::JournalMark>,
}

impl GroupMeta {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("metadata serialises")
    }

    /// `None` when the bytes are not a group checkpoint's (of this version).
    pub fn decode(b: &[u8]) -> Option<GroupMeta> {
        let m: GroupMeta = serde_json::from_slice(b).ok()?;
        (m.magic == MAGIC && m.version == VERSION).then_some(m)
    }

    /// Whether the bytes are a group checkpoint's of another version.
    pub fn other_version(b: &[u8]) -> Option<u32> {
        #[derive(Deserialize)]
        struct Head {
            magic: String,
            version: u32,
        }
        let h: Head = serde_json::from_slice(b).ok()?;
        (h.magic == MAGIC && h.version != VERSION).then_some(h.version)
    }

    /// The journal mark of level `id`, if it has one.
    pub fn journal(&self, id: u8) -> Option<&crate::store::JournalMark> {
        self.journals.iter().find(|j| j.level == id)
    }
}
