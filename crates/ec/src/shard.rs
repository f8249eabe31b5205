//! The self-describing shard file header (format version 1), specified byte for byte in
//! docs/ec.md. All integers little-endian; 64 bytes; the last 4 are a CRC-32C of the first 60.

use crate::error::{EcError, Result};
use crate::MAX_SHARDS;

/// The 8 magic bytes every shard file starts with.
pub const MAGIC: [u8; 8] = *b"KIOKUEC\0";
/// The format version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Size of the header in bytes; the payload follows it.
pub const HEADER_LEN: usize = 64;
/// Identifier of the coding matrix: systematic Cauchy over GF(2^8), polynomial 0x11d,
/// `C[j][i] = 1/((k+j) xor i)` (ISA-L's `gf_gen_cauchy1_matrix`).
pub const MATRIX_CAUCHY_11D: u32 = 1;

/// What a shard file says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    /// Data shards.
    pub k: u16,
    /// Parity shards.
    pub m: u16,
    /// This shard's index, `0..k` data, `k..k+m` parity.
    pub index: u16,
    /// Bytes of each shard per stripe (the last stripe may use fewer, see docs/ec.md).
    pub stripe_unit: u32,
    /// Payload bytes following the header.
    pub shard_len: u64,
    /// Length of the original file.
    pub original_len: u64,
    /// CRC-32C of the original file.
    pub file_crc: u32,
    /// CRC-32C of this shard's payload.
    pub payload_crc: u32,
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

impl ShardHeader {
    /// Serialises the header (64 bytes, CRC included).
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        b[12..14].copy_from_slice(&self.k.to_le_bytes());
        b[14..16].copy_from_slice(&self.m.to_le_bytes());
        b[16..18].copy_from_slice(&self.index.to_le_bytes());
        // 18..20 reserved, zero.
        b[20..24].copy_from_slice(&self.stripe_unit.to_le_bytes());
        b[24..32].copy_from_slice(&self.shard_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.original_len.to_le_bytes());
        b[40..44].copy_from_slice(&self.file_crc.to_le_bytes());
        b[44..48].copy_from_slice(&self.payload_crc.to_le_bytes());
        b[48..52].copy_from_slice(&MATRIX_CAUCHY_11D.to_le_bytes());
        // 52..60 reserved, zero.
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and checks a header: magic, version, header CRC, and that every field is
    /// consistent (k, m, index in range; shard length matches original length and unit).
    pub fn parse(b: &[u8]) -> Result<ShardHeader> {
        if b.len() < HEADER_LEN {
            return Err(EcError::BadHeaderField { field: "length" });
        }
        if b[0..8] != MAGIC {
            return Err(EcError::BadMagic);
        }
        if crc32c::crc32c(&b[..60]) != u32_at(b, 60) {
            return Err(EcError::HeaderChecksum);
        }
        let version = u16_at(b, 8);
        if version != VERSION {
            return Err(EcError::UnsupportedVersion(version));
        }
        if u16_at(b, 10) as usize != HEADER_LEN {
            return Err(EcError::BadHeaderField {
                field: "header_len",
            });
        }
        if u32_at(b, 48) != MATRIX_CAUCHY_11D {
            return Err(EcError::BadHeaderField { field: "matrix" });
        }
        if u16_at(b, 18) != 0 || b[52..60].iter().any(|&x| x != 0) {
            return Err(EcError::BadHeaderField { field: "reserved" });
        }
        let h = ShardHeader {
            k: u16_at(b, 12),
            m: u16_at(b, 14),
            index: u16_at(b, 16),
            stripe_unit: u32_at(b, 20),
            shard_len: u64_at(b, 24),
            original_len: u64_at(b, 32),
            file_crc: u32_at(b, 40),
            payload_crc: u32_at(b, 44),
        };
        let (k, m) = (h.k as usize, h.m as usize);
        if k == 0 || m == 0 || k + m > MAX_SHARDS {
            return Err(EcError::BadHeaderField { field: "k/m" });
        }
        if h.index as usize >= k + m {
            return Err(EcError::BadHeaderField { field: "index" });
        }
        if h.stripe_unit == 0 {
            return Err(EcError::BadHeaderField {
                field: "stripe_unit",
            });
        }
        if Some(h.shard_len) != shard_len_for(h.original_len, k, h.stripe_unit as usize) {
            return Err(EcError::BadHeaderField { field: "shard_len" });
        }
        Ok(h)
    }

    /// Whether two shards belong to the same encoding (everything but index and payload CRC).
    pub fn same_encoding(&self, o: &ShardHeader) -> Option<&'static str> {
        if (self.k, self.m) != (o.k, o.m) {
            Some("k/m")
        } else if self.stripe_unit != o.stripe_unit {
            Some("stripe_unit")
        } else if self.original_len != o.original_len {
            Some("original_len")
        } else if self.file_crc != o.file_crc {
            Some("file_crc")
        } else {
            None
        }
    }
}

/// Layout of a file striped over `k` data shards with `unit` bytes per shard per stripe:
/// full stripes hold `k * unit` file bytes; a final partial stripe of `r` bytes uses
/// `ceil(r / k)` bytes per shard, zero padded. Returns the per-shard unit of stripe `s`.
pub fn stripe_units(original_len: u64, k: usize, unit: usize) -> impl Iterator<Item = usize> {
    let full = (k as u64) * unit as u64;
    let n_full = original_len / full;
    let rest = original_len % full;
    let last = rest.div_ceil(k as u64) as usize;
    (0..n_full)
        .map(move |_| unit)
        .chain((rest > 0).then_some(last))
}

/// Payload length of every shard for a file of `original_len` bytes (`None` on overflow).
pub fn shard_len_for(original_len: u64, k: usize, unit: usize) -> Option<u64> {
    let full = (k as u64).checked_mul(unit as u64)?;
    let n_full = original_len / full;
    let rest = original_len % full;
    n_full
        .checked_mul(unit as u64)?
        .checked_add(rest.div_ceil(k as u64))
}
