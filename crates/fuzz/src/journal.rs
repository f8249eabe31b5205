//! The file journal's on-pool structures: the head, stash entries, segment headers, and
//! records. Records are built from the input with their checksums and lengths right, so the
//! fuzzer reaches the payload decoders; what decodes must re-encode to the same bytes.

use kioku_run::journal::format::{
    self, decode_stash_entry, encode_record, scan_segment, HeadInfo, Kind, Record, SegmentHeader,
    RECORD_HEADER_LEN,
};

const KINDS: [Kind; 8] = [
    Kind::FileBase,
    Kind::PreImage,
    Kind::Created,
    Kind::Unlinked,
    Kind::UnlinkedCopy,
    Kind::CopyData,
    Kind::Rmdir,
    Kind::Renamed,
];

fn crc(b: &[u8]) -> u32 {
    kioku_pool::format::crc(b)
}

/// A 64-byte block with its checksum (bytes 60..64) over the first 60 set right.
fn with_crc60(b: &[u8]) -> [u8; 64] {
    let mut out = [0u8; 64];
    let n = b.len().min(64);
    out[..n].copy_from_slice(&b[..n]);
    let c = crc(&out[..60]);
    out[60..].copy_from_slice(&c.to_le_bytes());
    out
}

/// Input: a mode byte, then
/// - mode 0: a head and a segment header (checksums set right) and a stash entry;
/// - otherwise: records of (kind u8, tag u8, payload length u8, payload) made into a segment
///   body with right checksums, the mode byte's low bit flipping one byte afterwards.
pub fn journal(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode == 0 {
        let _ = HeadInfo::decode(&with_crc60(rest));
        let _ = HeadInfo::decode(rest);
        let _ = SegmentHeader::decode(&with_crc60(rest));
        let _ = decode_stash_entry(rest);
        if rest.len() >= 8 {
            let mut e = rest.to_vec();
            let c = crc(&e[8..]);
            e[4..8].copy_from_slice(&c.to_le_bytes());
            let _ = decode_stash_entry(&e);
        }
        return;
    }
    let mut body = Vec::new();
    let mut rest = rest;
    let first_seq = 7u64;
    let mut seq = first_seq;
    while rest.len() >= 3 {
        let kind = KINDS[rest[0] as usize % KINDS.len()];
        let tag = rest[1] as u64;
        let plen = (rest[2] as usize).min(rest.len() - 3);
        let payload = &rest[3..3 + plen];
        rest = &rest[3 + plen..];
        body.extend_from_slice(&raw_record(seq, tag, kind, payload));
        seq += 1;
    }
    if mode & 1 != 0 && !body.is_empty() {
        let i = (mode as usize * 31) % body.len();
        body[i] ^= 0x40;
    }
    let (records, end) = scan_segment(&body, first_seq);
    assert!(end <= body.len());
    for (h, at) in records {
        let len = h.len as usize;
        let (_, payload) =
            format::decode_record(&body[at..at + len], h.seq).expect("a scanned record decodes");
        if let Ok(rec) = Record::decode_payload(h.kind, payload) {
            let again = encode_record(h.seq, h.tag, &rec);
            let (_, p2) = format::decode_record(&again, h.seq).expect("re-encoded record");
            assert_eq!(
                Record::decode_payload(h.kind, p2).as_ref(),
                Ok(&rec),
                "record does not round-trip"
            );
        }
    }
}

/// A record as the journal writes one: checksum, length, sequence, tag, kind, payload length,
/// payload padded to 8 bytes.
fn raw_record(seq: u64, tag: u64, kind: Kind, payload: &[u8]) -> Vec<u8> {
    let len = format::record_len(payload.len());
    let mut b = vec![0u8; len];
    b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..24].copy_from_slice(&tag.to_le_bytes());
    b[24..26].copy_from_slice(&(kind as u16).to_le_bytes());
    b[28..32].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b[RECORD_HEADER_LEN..RECORD_HEADER_LEN + payload.len()].copy_from_slice(payload);
    let c = crc(&b[4..len]);
    b[0..4].copy_from_slice(&c.to_le_bytes());
    b
}
