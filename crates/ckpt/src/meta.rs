//! A context's metadata on media: its region table (NDCKPT's page tables, in a form a process
//! can remap), the checksum of every page, and the caller's metadata (registers, for a process).
//!
//! Layout (little-endian), `ckpt.meta.<ctx>` section:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `KCKPCTX1` |
//! | 8 | 8 | checkpoint epoch |
//! | 16 | 8 | checkpoint time, ns since the Unix epoch |
//! | 24 | 4 | number of regions `n` |
//! | 28 | 4 | page size |
//! | 32 | 8 | length of the caller's metadata `u` |
//! | 40 | 128 × n | region entries |
//! | … | 4 × pages | CRC-32C of every page of every region, in table order |
//! | … | u | the caller's metadata |
//!
//! Region entry (128 bytes): name (64, UTF-8, NUL-padded), id (8), address (8), length (8),
//! reservation (8), flags (4), reserved (28, zero). The whole encoding's CRC-32C and length are
//! committed in the pool's roots, so a torn or damaged metadata block is never trusted.

use serde::Serialize;

pub const MAGIC: [u8; 8] = *b"KCKPCTX1";
const HEAD: usize = 40;
const ENTRY: usize = 128;
pub const MAX_NAME: usize = 63;

/// One region as the metadata records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegionRecord {
    pub name: String,
    /// Stable number naming the region's pool sections (`ckpt.r<id>.<ctx>`).
    pub id: u64,
    pub addr: usize,
    pub len: u64,
    pub reserve: u64,
    pub flags: u32,
}

/// A decoded metadata block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextMeta {
    pub epoch: u64,
    pub time_ns: u64,
    pub page_size: u32,
    pub regions: Vec<RegionRecord>,
    /// Per region, the CRC-32C of each page.
    pub crcs: Vec<Vec<u32>>,
    pub user: Vec<u8>,
}

fn put(b: &mut Vec<u8>, v: &[u8]) {
    b.extend_from_slice(v);
}

/// Serialises a metadata block from borrowed parts (the engine encodes straight from its live
/// tables, without copying them into a `ContextMeta` first).
pub fn encode_parts(
    epoch: u64,
    time_ns: u64,
    page_size: u32,
    entries: &[(&RegionRecord, &[u32])],
    user: &[u8],
) -> Vec<u8> {
    let pages: usize = entries.iter().map(|e| e.1.len()).sum();
    let mut b = Vec::with_capacity(HEAD + ENTRY * entries.len() + 4 * pages + user.len());
    put(&mut b, &MAGIC);
    put(&mut b, &epoch.to_le_bytes());
    put(&mut b, &time_ns.to_le_bytes());
    put(&mut b, &(entries.len() as u32).to_le_bytes());
    put(&mut b, &page_size.to_le_bytes());
    put(&mut b, &(user.len() as u64).to_le_bytes());
    for (r, _) in entries {
        let mut name = [0u8; 64];
        name[..r.name.len()].copy_from_slice(r.name.as_bytes());
        put(&mut b, &name);
        put(&mut b, &r.id.to_le_bytes());
        put(&mut b, &(r.addr as u64).to_le_bytes());
        put(&mut b, &r.len.to_le_bytes());
        put(&mut b, &r.reserve.to_le_bytes());
        put(&mut b, &r.flags.to_le_bytes());
        put(&mut b, &[0u8; 28]);
    }
    for (_, crcs) in entries {
        for c in *crcs {
            put(&mut b, &c.to_le_bytes());
        }
    }
    put(&mut b, user);
    b
}

impl ContextMeta {
    /// Serialises; returns the bytes (their CRC and length go into the commit roots).
    pub fn encode(&self) -> Vec<u8> {
        let entries: Vec<(&RegionRecord, &[u32])> = self
            .regions
            .iter()
            .zip(self.crcs.iter().map(Vec::as_slice))
            .collect();
        encode_parts(
            self.epoch,
            self.time_ns,
            self.page_size,
            &entries,
            &self.user,
        )
    }

    /// Parses a block whose checksum the caller has verified; `Err` names what is inconsistent.
    pub fn decode(b: &[u8]) -> Result<ContextMeta, String> {
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        if b.len() < HEAD || b[..8] != MAGIC {
            return Err("bad magic".into());
        }
        let n = u32_at(24) as usize;
        let page_size = u32_at(28);
        let user_len = u64_at(32) as usize;
        if page_size == 0 || !page_size.is_power_of_two() {
            return Err("bad page size".into());
        }
        // Every length read from the block is checked against what is left of it, without
        // arithmetic that could overflow on a damaged or hostile value.
        let mut at = HEAD;
        if n.checked_mul(ENTRY).is_none_or(|l| l > b.len() - at) {
            return Err("region table truncated".into());
        }
        let mut regions = Vec::with_capacity(n);
        for _ in 0..n {
            let e = &b[at..at + ENTRY];
            let end = e[..64].iter().position(|&c| c == 0).unwrap_or(64);
            let name = std::str::from_utf8(&e[..end]).map_err(|_| "region name not UTF-8")?;
            let r = RegionRecord {
                name: name.to_string(),
                id: u64_at(at + 64),
                addr: u64_at(at + 72) as usize,
                len: u64_at(at + 80),
                reserve: u64_at(at + 88),
                flags: u32_at(at + 96),
            };
            if !r.len.is_multiple_of(page_size as u64) || r.len > r.reserve {
                return Err(format!("region '{}' has an impossible size", r.name));
            }
            regions.push(r);
            at += ENTRY;
        }
        let mut crcs = Vec::with_capacity(n);
        for r in &regions {
            let pages = (r.len / page_size as u64) as usize;
            if pages.checked_mul(4).is_none_or(|l| l > b.len() - at) {
                return Err("page checksums truncated".into());
            }
            crcs.push((0..pages).map(|i| u32_at(at + 4 * i)).collect());
            at += 4 * pages;
        }
        if b.len() - at != user_len {
            return Err("length does not match its contents".into());
        }
        Ok(ContextMeta {
            epoch: u64_at(8),
            time_ns: u64_at(16),
            page_size,
            regions,
            crcs,
            user: b[at..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let m = ContextMeta {
            epoch: 3,
            time_ns: 9,
            page_size: 4096,
            regions: vec![RegionRecord {
                name: "heap".into(),
                id: 1,
                addr: 0x7000_0000,
                len: 8192,
                reserve: 1 << 20,
                flags: 0,
            }],
            crcs: vec![vec![1, 2]],
            user: b"registers".to_vec(),
        };
        let b = m.encode();
        assert_eq!(ContextMeta::decode(&b), Ok(m));
        assert!(ContextMeta::decode(&b[..b.len() - 1]).is_err());
    }
}
