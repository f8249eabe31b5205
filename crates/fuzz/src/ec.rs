//! Shard files as `kioku ec decode` reads them: a real encoding of a payload taken from the
//! input, then shards damaged, dropped and their headers' checksums optionally set right. A
//! decode either refuses or gives back exactly the payload — never different bytes.

use std::io::Cursor;

use kioku_ec::shard::HEADER_LEN;
use kioku_ec::stream::{decode_stream, encode_stream, read_header, ShardInput};
use kioku_ec::Codec;

/// Input: k, m, stripe unit, a bitmask of shards to drop, a flag (set header checksums right),
/// the payload length, the payload, then damage as (shard u8, offset u16, xor u8).
pub fn ec_shards(data: &[u8]) {
    if data.len() < 6 {
        return;
    }
    let k = 1 + data[0] as usize % 4;
    let m = 1 + data[1] as usize % 3;
    let unit = 16 * (1 + data[2] as usize % 8);
    let drop_mask = data[3];
    let fix_crc = data[4] & 1 != 0;
    let plen = (data[5] as usize * 4).min(data.len() - 6);
    let payload = &data[6..6 + plen];
    let mut damage = &data[6 + plen..];
    let codec = Codec::new(k, m).expect("k and m in range");
    let mut outs: Vec<Cursor<Vec<u8>>> = (0..k + m).map(|_| Cursor::new(Vec::new())).collect();
    encode_stream(&codec, payload, &mut outs, unit, &mut |_| {}).expect("encoding a payload");
    let mut shards: Vec<Vec<u8>> = outs.into_iter().map(Cursor::into_inner).collect();
    while damage.len() >= 4 {
        let s = damage[0] as usize % shards.len();
        let at = u16::from_le_bytes([damage[1], damage[2]]) as usize;
        if !shards[s].is_empty() {
            let i = at % shards[s].len();
            shards[s][i] ^= damage[3].max(1);
        }
        damage = &damage[4..];
    }
    if fix_crc {
        for s in &mut shards {
            if s.len() >= HEADER_LEN {
                let c = crc32c(&s[..60]);
                s[60..64].copy_from_slice(&c.to_le_bytes());
            }
        }
    }
    let mut inputs: Vec<ShardInput<Cursor<Vec<u8>>>> = shards
        .into_iter()
        .enumerate()
        .filter(|(i, _)| drop_mask & (1 << (i % 8)) == 0)
        .filter_map(|(_, bytes)| {
            let mut c = Cursor::new(bytes);
            let header = read_header(&mut c).ok()?;
            Some(ShardInput { header, reader: c })
        })
        .collect();
    let mut out = Vec::new();
    if decode_stream(&mut inputs, &mut out, &mut |_| {}).is_ok() {
        assert_eq!(out, payload, "a decode succeeded with different bytes");
    }
}

fn crc32c(b: &[u8]) -> u32 {
    kioku_pool::format::crc(b)
}
