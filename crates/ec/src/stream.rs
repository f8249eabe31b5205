//! Streaming encode and decode of whole files into shard streams with bounded memory:
//! at most `(k + m) * stripe_unit` bytes of buffers, whatever the file size.

use crate::error::{EcError, Result};
use crate::shard::{stripe_units, ShardHeader, HEADER_LEN};
use crate::Codec;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};

/// Buffer budget the default stripe unit aims for.
pub const STRIPE_BUDGET: usize = 64 << 20;

/// A stripe unit (bytes per shard per stripe) keeping all `k + m` buffers near
/// [`STRIPE_BUDGET`]: between 4 KiB and 1 MiB, a multiple of 4 KiB.
pub fn default_stripe_unit(k: usize, m: usize) -> usize {
    (STRIPE_BUDGET / (k + m).max(1)).clamp(4096, 1 << 20) & !4095
}

fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(x) => n += x,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Encodes everything `input` yields into `k + m` shard streams (`outs[i]` gets shard
/// `i`): a header placeholder, the payload, then the final header written at offset 0.
/// `progress` is called with the number of input bytes consumed so far.
pub fn encode_stream<R: Read, W: Write + Seek>(
    codec: &Codec,
    mut input: R,
    outs: &mut [W],
    stripe_unit: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<ShardHeader>> {
    let (k, m) = (codec.k(), codec.m());
    if outs.len() != k + m {
        return Err(EcError::WrongShardCount {
            what: "output",
            expected: k + m,
            got: outs.len(),
        });
    }
    if stripe_unit == 0 || stripe_unit > u32::MAX as usize {
        return Err(EcError::BadHeaderField {
            field: "stripe_unit",
        });
    }
    for o in outs.iter_mut() {
        o.write_all(&[0u8; HEADER_LEN])?;
    }
    let mut data = vec![0u8; k * stripe_unit];
    let mut parity = vec![0u8; m * stripe_unit];
    let mut file_crc = 0u32;
    let mut crcs = vec![0u32; k + m];
    let mut total = 0u64;
    let mut shard_len = 0u64;
    loop {
        let n = read_full(&mut input, &mut data)?;
        if n == 0 {
            break;
        }
        file_crc = crc32c::crc32c_append(file_crc, &data[..n]);
        total += n as u64;
        let u = if n == data.len() {
            stripe_unit
        } else {
            n.div_ceil(k)
        };
        data[n..k * u].fill(0);
        let d: Vec<&[u8]> = data[..k * u].chunks_exact(u).collect();
        let mut p: Vec<&mut [u8]> = parity[..m * u].chunks_exact_mut(u).collect();
        codec.encode(&d, &mut p)?;
        for (i, s) in d.iter().copied().chain(p.iter().map(|x| &**x)).enumerate() {
            crcs[i] = crc32c::crc32c_append(crcs[i], s);
            outs[i].write_all(s)?;
        }
        shard_len += u as u64;
        progress(total);
        if n < data.len() {
            break;
        }
    }
    let mut headers = Vec::with_capacity(k + m);
    for (i, o) in outs.iter_mut().enumerate() {
        let h = ShardHeader {
            k: k as u16,
            m: m as u16,
            index: i as u16,
            stripe_unit: stripe_unit as u32,
            shard_len,
            original_len: total,
            file_crc,
            payload_crc: crcs[i],
        };
        o.seek(SeekFrom::Start(0))?;
        o.write_all(&h.to_bytes())?;
        o.flush()?;
        headers.push(h);
    }
    tracing::debug!(k, m, bytes = total, shard_len, "encoded stream");
    Ok(headers)
}

/// One shard stream for decoding: its parsed header and a reader at the payload start.
pub struct ShardInput<R> {
    pub header: ShardHeader,
    pub reader: R,
}

/// Reads and parses a shard header from the start of `r`.
pub fn read_header<R: Read>(r: &mut R) -> Result<ShardHeader> {
    let mut b = [0u8; HEADER_LEN];
    let n = read_full(r, &mut b)?;
    if n < HEADER_LEN {
        if n >= 8 && b[..8] != crate::shard::MAGIC {
            return Err(EcError::BadMagic);
        }
        return Err(EcError::BadHeaderField { field: "length" });
    }
    ShardHeader::parse(&b)
}

/// Rebuilds the original file from shard streams into `out`, using the first `k` inputs
/// by index (data shards first). Checks the payload CRC of every shard it used and the
/// CRC of the rebuilt file; on [`EcError::PayloadChecksum`] or [`EcError::Truncated`]
/// the caller may retry without that shard. Returns the indices used.
pub fn decode_stream<R: Read, W: Write>(
    inputs: &mut [ShardInput<R>],
    mut out: W,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<usize>> {
    let first = inputs
        .first()
        .ok_or(EcError::TooFewShards { have: 0, need: 1 })?
        .header;
    let (k, m) = (first.k as usize, first.m as usize);
    let mut seen = [false; 256];
    for inp in inputs.iter() {
        let idx = inp.header.index as usize;
        if let Some(field) = first.same_encoding(&inp.header) {
            return Err(EcError::InconsistentShards { index: idx, field });
        }
        if seen[idx] {
            return Err(EcError::DuplicateIndex { index: idx });
        }
        seen[idx] = true;
    }
    if inputs.len() < k {
        return Err(EcError::TooFewShards {
            have: inputs.len(),
            need: k,
        });
    }
    let codec = Codec::new(k, m)?;
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_unstable_by_key(|&i| inputs[i].header.index);
    order.truncate(k);
    let used: Vec<usize> = order
        .iter()
        .map(|&i| inputs[i].header.index as usize)
        .collect();
    let missing: Vec<usize> = (0..k).filter(|i| !used.contains(i)).collect();
    let unit = first.stripe_unit as usize;
    let mut inbuf = vec![0u8; k * unit];
    let mut outbuf = vec![0u8; missing.len() * unit];
    let mut crcs = vec![0u32; k];
    let mut file_crc = 0u32;
    let mut left = first.original_len;
    for u in stripe_units(first.original_len, k, unit) {
        for (slot, &i) in order.iter().enumerate() {
            let buf = &mut inbuf[slot * u..(slot + 1) * u];
            let n = read_full(&mut inputs[i].reader, buf)?;
            if n < u {
                return Err(EcError::Truncated {
                    index: inputs[i].header.index as usize,
                });
            }
            crcs[slot] = crc32c::crc32c_append(crcs[slot], buf);
        }
        let surv: Vec<(usize, &[u8])> = used
            .iter()
            .zip(inbuf[..k * u].chunks_exact(u))
            .map(|(&i, s)| (i, s))
            .collect();
        let mut want: Vec<(usize, &mut [u8])> = missing
            .iter()
            .zip(outbuf[..missing.len() * u].chunks_exact_mut(u))
            .map(|(&i, b)| (i, b))
            .collect();
        codec.decode(&surv, &mut want)?;
        for d in 0..k {
            if left == 0 {
                break;
            }
            let s: &[u8] = match used.binary_search(&d) {
                Ok(slot) => surv[slot].1,
                Err(_) => {
                    let w = missing.binary_search(&d).expect("missing data shard");
                    &want[w].1[..]
                }
            };
            let take = (u as u64).min(left) as usize;
            file_crc = crc32c::crc32c_append(file_crc, &s[..take]);
            out.write_all(&s[..take])?;
            left -= take as u64;
        }
        progress(first.original_len - left);
    }
    for (slot, &i) in order.iter().enumerate() {
        if crcs[slot] != inputs[i].header.payload_crc {
            return Err(EcError::PayloadChecksum {
                index: inputs[i].header.index as usize,
            });
        }
    }
    if file_crc != first.file_crc {
        return Err(EcError::FileChecksum);
    }
    out.flush()?;
    Ok(used)
}

/// Reads a whole shard stream and checks it: header, payload length (no more, no less)
/// and payload CRC. Returns the header of a sound shard.
pub fn verify_shard<R: Read>(mut r: R, progress: &mut dyn FnMut(u64)) -> Result<ShardHeader> {
    let h = read_header(&mut r)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    let mut left = h.shard_len;
    while left > 0 {
        let want = (buf.len() as u64).min(left) as usize;
        let n = read_full(&mut r, &mut buf[..want])?;
        if n < want {
            return Err(EcError::Truncated {
                index: h.index as usize,
            });
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        left -= n as u64;
        progress(n as u64);
    }
    if read_full(&mut r, &mut buf[..1])? != 0 {
        return Err(EcError::BadHeaderField { field: "shard_len" });
    }
    if crc != h.payload_crc {
        return Err(EcError::PayloadChecksum {
            index: h.index as usize,
        });
    }
    Ok(h)
}
