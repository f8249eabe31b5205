//! The pool's byte layout: header, commit record (index + two slots), section tables.
//!
//! `docs/pool-format.md` is the normative description; this module is its executable twin.
//! Everything is little-endian. Parsing works on plain byte slices so that `inspect` can read a
//! pool with `pread` (no mapping, no SIGBUS on a truncated file) and `Pool` can read its mapping.

use serde::Serialize;

/// First 8 bytes of every pool file.
pub const MAGIC: [u8; 8] = *b"KIOKUPOL";
/// The format version this code reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the header covered by its checksum (the CRC itself sits at `HEADER_CRC_AT`).
pub const HEADER_LEN: usize = 256;
const HEADER_CRC_AT: usize = HEADER_LEN - 4;
/// The commit page: the live index at its start, slot 0 and slot 1 after it.
pub const COMMIT_OFF: u64 = 4096;
/// Offset of the 8-byte live index (its own cache line).
pub const INDEX_OFF: u64 = COMMIT_OFF;
/// Bytes of one commit slot (four cache lines).
pub const SLOT_LEN: usize = 256;
const SLOT_CRC_AT: usize = SLOT_LEN - 4;
/// Most roots a commit carries.
pub const MAX_ROOTS: usize = 16;
/// Offsets of the two section tables; table `i` belongs to slot `i`.
pub const TABLE_OFF: [u64; 2] = [8192, 8192 + TABLE_LEN as u64];
/// Bytes of one section table.
pub const TABLE_LEN: usize = MAX_SECTIONS * ENTRY_LEN;
/// Bytes of one section-table entry.
pub const ENTRY_LEN: usize = 64;
/// Entries per table (32 KiB): enough for a process checkpoint's regions in two contexts.
pub const MAX_SECTIONS: usize = 512;
/// Longest section name in bytes (UTF-8, NUL-padded on media).
pub const MAX_NAME_LEN: usize = 32;
/// Longest pool kind tag in bytes.
pub const MAX_KIND_LEN: usize = 32;
/// End of the fixed metadata; the data area starts here, rounded up to the page size.
pub const METADATA_END: u64 = 8192 + 2 * TABLE_LEN as u64;

/// Offset of commit slot `i`.
pub fn slot_off(i: usize) -> u64 {
    COMMIT_OFF + 256 * (i as u64 + 1)
}

/// CRC-32C (Castagnoli), as used for every checksum in the format.
pub fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A NUL-padded UTF-8 string field, or `None` if it is not valid UTF-8 or has bytes after NUL.
fn str_field(b: &[u8]) -> Option<String> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    if b[end..].iter().any(|&c| c != 0) {
        return None;
    }
    std::str::from_utf8(&b[..end]).ok().map(str::to_owned)
}

fn put_str(b: &mut [u8], s: &str) {
    b.fill(0);
    b[..s.len()].copy_from_slice(s.as_bytes());
}

/// The pool header: creation parameters, written once at creation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Header {
    pub version: u32,
    pub uuid: [u8; 16],
    pub page_size: u32,
    /// Medium the pool was created on (`MediumKind::code`).
    pub created_medium: u32,
    pub created_unix_ns: u64,
    /// Which kind of state the pool holds (e.g. "kioku.ckpt"); callers can insist on it.
    pub kind: String,
    /// Offset of the data area (page-aligned, ≥ METADATA_END).
    pub data_off: u64,
}

/// Why the first bytes of a file are not a usable header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Shorter than a header.
    Short { len: usize },
    /// Magic does not match.
    NotAPool,
    /// A version this code does not read.
    Version(u32),
    /// Header checksum mismatch.
    Checksum { stored: u32, computed: u32 },
    /// A field has an impossible value.
    Invalid(&'static str),
}

impl Header {
    /// Serialises into the first `HEADER_LEN` bytes of the file.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, 8, self.version);
        put_u32(&mut b, 12, HEADER_LEN as u32);
        b[16..32].copy_from_slice(&self.uuid);
        put_u32(&mut b, 32, self.page_size);
        put_u32(&mut b, 36, self.created_medium);
        put_u64(&mut b, 40, self.created_unix_ns);
        put_str(&mut b[48..80], &self.kind);
        put_u32(&mut b, 80, MAX_SECTIONS as u32);
        put_u32(&mut b, 84, MAX_ROOTS as u32);
        put_u64(&mut b, 88, COMMIT_OFF);
        put_u64(&mut b, 96, TABLE_OFF[0]);
        put_u64(&mut b, 104, TABLE_OFF[1]);
        put_u64(&mut b, 112, self.data_off);
        let c = crc(&b[..HEADER_CRC_AT]);
        put_u32(&mut b, HEADER_CRC_AT, c);
        b
    }

    /// Parses and checks a header. The order of checks is part of the format: magic, version,
    /// checksum, then field values — so that a future version may change everything after the
    /// version field.
    pub fn decode(b: &[u8]) -> Result<Header, HeaderProblem> {
        if b.len() < 12 {
            return Err(if b.len() >= 8 && b[..8] != MAGIC {
                HeaderProblem::NotAPool
            } else {
                HeaderProblem::Short { len: b.len() }
            });
        }
        if b[..8] != MAGIC {
            return Err(HeaderProblem::NotAPool);
        }
        let version = u32_at(b, 8);
        if version != FORMAT_VERSION {
            return Err(HeaderProblem::Version(version));
        }
        if b.len() < HEADER_LEN {
            return Err(HeaderProblem::Short { len: b.len() });
        }
        let stored = u32_at(b, HEADER_CRC_AT);
        let computed = crc(&b[..HEADER_CRC_AT]);
        if stored != computed {
            return Err(HeaderProblem::Checksum { stored, computed });
        }
        let page_size = u32_at(b, 32);
        if u32_at(b, 12) != HEADER_LEN as u32 {
            return Err(HeaderProblem::Invalid("header length"));
        }
        if !page_size.is_power_of_two() || page_size < 4096 {
            return Err(HeaderProblem::Invalid("page size"));
        }
        if u32_at(b, 80) != MAX_SECTIONS as u32
            || u32_at(b, 84) != MAX_ROOTS as u32
            || u64_at(b, 88) != COMMIT_OFF
            || u64_at(b, 96) != TABLE_OFF[0]
            || u64_at(b, 104) != TABLE_OFF[1]
        {
            return Err(HeaderProblem::Invalid("metadata layout"));
        }
        let data_off = u64_at(b, 112);
        if data_off < METADATA_END || !data_off.is_multiple_of(page_size as u64) {
            return Err(HeaderProblem::Invalid("data offset"));
        }
        let kind = str_field(&b[48..80]).ok_or(HeaderProblem::Invalid("kind tag"))?;
        if b[120..HEADER_CRC_AT].iter().any(|&c| c != 0) {
            return Err(HeaderProblem::Invalid("reserved bytes"));
        }
        Ok(Header {
            version,
            uuid: b[16..32].try_into().expect("16 bytes"),
            page_size,
            created_medium: u32_at(b, 36),
            created_unix_ns: u64_at(b, 40),
            kind,
            data_off,
        })
    }

    /// The UUID in its usual text form.
    pub fn uuid_string(&self) -> String {
        let h: String = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// One commit slot: everything a commit makes durable besides section contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Slot {
    pub epoch: u64,
    pub committed_unix_ns: u64,
    /// The file length this commit needs; a shorter file is truncated.
    pub pool_len: u64,
    /// Entries used in this slot's section table.
    pub table_entries: u32,
    /// CRC-32C of those entries (`table_entries * ENTRY_LEN` bytes).
    pub table_crc: u32,
    pub roots: Vec<u64>,
}

/// Why a slot cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "problem")]
pub enum SlotProblem {
    /// Never written (all zero).
    Empty,
    /// Checksum mismatch: torn or damaged.
    Checksum { stored: u32, computed: u32 },
    /// Fields out of range.
    Invalid { what: String },
}

impl Slot {
    pub fn encode(&self) -> [u8; SLOT_LEN] {
        assert!(self.roots.len() <= MAX_ROOTS, "too many roots");
        let mut b = [0u8; SLOT_LEN];
        put_u64(&mut b, 0, self.epoch);
        put_u64(&mut b, 8, self.committed_unix_ns);
        put_u64(&mut b, 16, self.pool_len);
        put_u32(&mut b, 24, self.table_entries);
        put_u32(&mut b, 28, self.table_crc);
        put_u32(&mut b, 32, self.roots.len() as u32);
        for (i, r) in self.roots.iter().enumerate() {
            put_u64(&mut b, 40 + 8 * i, *r);
        }
        let c = crc(&b[..SLOT_CRC_AT]);
        put_u32(&mut b, SLOT_CRC_AT, c);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Slot, SlotProblem> {
        let b = &b[..SLOT_LEN];
        if b.iter().all(|&c| c == 0) {
            return Err(SlotProblem::Empty);
        }
        let stored = u32_at(b, SLOT_CRC_AT);
        let computed = crc(&b[..SLOT_CRC_AT]);
        if stored != computed {
            return Err(SlotProblem::Checksum { stored, computed });
        }
        let invalid = |what: &str| SlotProblem::Invalid { what: what.into() };
        let table_entries = u32_at(b, 24);
        if table_entries as usize > MAX_SECTIONS {
            return Err(invalid("section count"));
        }
        let nroots = u32_at(b, 32) as usize;
        if nroots > MAX_ROOTS {
            return Err(invalid("root count"));
        }
        if b[40 + 8 * nroots..SLOT_CRC_AT].iter().any(|&c| c != 0) || u32_at(b, 36) != 0 {
            return Err(invalid("reserved bytes"));
        }
        Ok(Slot {
            epoch: u64_at(b, 0),
            committed_unix_ns: u64_at(b, 8),
            pool_len: u64_at(b, 16),
            table_entries,
            table_crc: u32_at(b, 28),
            roots: (0..nroots).map(|i| u64_at(b, 40 + 8 * i)).collect(),
        })
    }
}

/// Section flag bit the pool itself acts on (the others are the owner's): the section is
/// *sparse* — space is taken only for pages written into it (after [`crate::Pool::allocate`]),
/// the rest stays holes that read as zeros.
pub const SECTION_SPARSE: u32 = 1 << 30;

/// One named, page-aligned extent of the data area.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Section {
    pub name: String,
    pub offset: u64,
    pub len: u64,
    /// Owner-defined bits, except [`SECTION_SPARSE`].
    pub flags: u32,
}

impl Section {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }

    /// Whether space is taken only for the pages written into it ([`SECTION_SPARSE`]).
    pub fn is_sparse(&self) -> bool {
        self.flags & SECTION_SPARSE != 0
    }
}

/// Serialises a section table (`entries.len() * ENTRY_LEN` bytes).
pub fn encode_table(entries: &[Section]) -> Vec<u8> {
    let mut out = vec![0u8; entries.len() * ENTRY_LEN];
    for (e, b) in entries.iter().zip(out.chunks_exact_mut(ENTRY_LEN)) {
        put_str(&mut b[0..32], &e.name);
        put_u64(b, 32, e.offset);
        put_u64(b, 40, e.len);
        put_u32(b, 48, e.flags);
    }
    out
}

/// Parses the table a slot describes and checks it against the header and the slot's pool
/// length: checksum, names (valid, unique), alignment, bounds and no overlap.
pub fn decode_table(b: &[u8], slot: &Slot, header: &Header) -> Result<Vec<Section>, String> {
    let n = slot.table_entries as usize;
    let bytes = &b[..n * ENTRY_LEN];
    let computed = crc(bytes);
    if computed != slot.table_crc {
        return Err(format!(
            "section table checksum mismatch (stored {:#010x}, computed {computed:#010x})",
            slot.table_crc
        ));
    }
    let page = header.page_size as u64;
    let mut out: Vec<Section> = Vec::with_capacity(n);
    for (i, e) in bytes.chunks_exact(ENTRY_LEN).enumerate() {
        let name = str_field(&e[0..32])
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("section entry {i}: invalid name"))?;
        if e[52..64].iter().any(|&c| c != 0) {
            return Err(format!("section '{name}': reserved bytes are not zero"));
        }
        let s = Section {
            name,
            offset: u64_at(e, 32),
            len: u64_at(e, 40),
            flags: u32_at(e, 48),
        };
        if !s.offset.is_multiple_of(page)
            || !s.len.is_multiple_of(page)
            || s.offset < header.data_off
        {
            return Err(format!(
                "section '{}': extent is not page-aligned in the data area",
                s.name
            ));
        }
        if s.offset
            .checked_add(s.len)
            .is_none_or(|end| end > slot.pool_len)
        {
            return Err(format!(
                "section '{}': extent {}+{} ends past the committed pool length {}",
                s.name, s.offset, s.len, slot.pool_len
            ));
        }
        if out.iter().any(|o| o.name == s.name) {
            return Err(format!("section '{}' appears twice", s.name));
        }
        if let Some(o) = out
            .iter()
            .find(|o| o.offset < s.end() && s.offset < o.end())
        {
            return Err(format!("sections '{}' and '{}' overlap", o.name, s.name));
        }
        out.push(s);
    }
    Ok(out)
}

/// Checks a name for a section or a kind tag.
pub fn valid_name(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && !s.contains('\0')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            version: FORMAT_VERSION,
            uuid: [7; 16],
            page_size: 4096,
            created_medium: 2,
            created_unix_ns: 1,
            kind: "kioku.test".into(),
            data_off: METADATA_END,
        }
    }

    #[test]
    fn crc_is_castagnoli() {
        assert_eq!(crc(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn header_round_trip_and_checks() {
        let h = header();
        let mut b = h.encode().to_vec();
        assert_eq!(Header::decode(&b), Ok(h));
        b[20] ^= 1;
        assert!(matches!(
            Header::decode(&b),
            Err(HeaderProblem::Checksum { .. })
        ));
        b[0] = b'X';
        assert_eq!(Header::decode(&b), Err(HeaderProblem::NotAPool));
    }

    #[test]
    fn slot_round_trip_and_torn_detection() {
        let s = Slot {
            epoch: 9,
            committed_unix_ns: 5,
            pool_len: 1 << 20,
            table_entries: 2,
            table_crc: 3,
            roots: vec![1, 2, 3],
        };
        let mut b = s.encode();
        assert_eq!(Slot::decode(&b), Ok(s));
        for word in 0..SLOT_LEN / 8 {
            let mut t = b;
            t[word * 8] ^= 0x40;
            assert!(Slot::decode(&t).is_err(), "flipped word {word} undetected");
        }
        b.fill(0);
        assert_eq!(Slot::decode(&b), Err(SlotProblem::Empty));
    }

    #[test]
    fn table_rejects_overlap_and_bounds() {
        let h = header();
        let a = Section {
            name: "a".into(),
            offset: METADATA_END,
            len: 8192,
            flags: 0,
        };
        let b = Section {
            name: "b".into(),
            offset: METADATA_END + 4096,
            len: 4096,
            flags: 0,
        };
        let bytes = encode_table(&[a.clone(), b]);
        let slot = Slot {
            epoch: 1,
            committed_unix_ns: 0,
            pool_len: 1 << 20,
            table_entries: 2,
            table_crc: crc(&bytes),
            roots: vec![],
        };
        assert!(decode_table(&bytes, &slot, &h)
            .unwrap_err()
            .contains("overlap"));
        let bytes = encode_table(&[a]);
        let slot = Slot {
            pool_len: METADATA_END + 4000,
            table_entries: 1,
            table_crc: crc(&bytes),
            ..slot
        };
        assert!(decode_table(&bytes, &slot, &h)
            .unwrap_err()
            .contains("past the committed"));
    }
}
