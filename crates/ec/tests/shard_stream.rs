//! Shard header parsing and streaming encode/decode with bounded buffers.

use kioku_ec::shard::{shard_len_for, ShardHeader, HEADER_LEN};
use kioku_ec::stream::{decode_stream, encode_stream, read_header, verify_shard, ShardInput};
use kioku_ec::{Codec, EcError};
use proptest::prelude::*;
use std::io::Cursor;

fn sample() -> ShardHeader {
    ShardHeader {
        k: 10,
        m: 4,
        index: 3,
        stripe_unit: 4096,
        shard_len: shard_len_for(1_000_000, 10, 4096).unwrap(),
        original_len: 1_000_000,
        file_crc: 0xdead_beef,
        payload_crc: 0x1234_5678,
    }
}

#[test]
fn header_round_trips_and_is_64_bytes() {
    let h = sample();
    let b = h.to_bytes();
    assert_eq!(b.len(), HEADER_LEN);
    assert_eq!(&b[..8], b"KIOKUEC\0");
    assert_eq!(ShardHeader::parse(&b).unwrap(), h);
}

#[test]
fn every_single_bit_flip_in_the_header_is_caught() {
    let b = sample().to_bytes();
    for bit in 0..HEADER_LEN * 8 {
        let mut c = b;
        c[bit / 8] ^= 1 << (bit % 8);
        let e = ShardHeader::parse(&c).unwrap_err();
        assert!(
            matches!(e, EcError::BadMagic | EcError::HeaderChecksum),
            "bit {bit}: {e:?}"
        );
    }
}

/// Re-seals a modified header so that only the semantic checks can catch it.
fn reseal(mut b: [u8; 64]) -> [u8; 64] {
    let crc = crc32c::crc32c(&b[..60]);
    b[60..].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn semantically_bad_headers_are_typed_errors() {
    let good = sample().to_bytes();
    let mut b = good;
    b[8] = 2;
    assert!(matches!(
        ShardHeader::parse(&reseal(b)),
        Err(EcError::UnsupportedVersion(2))
    ));
    let cases: [(usize, u8, &str); 6] = [
        (12, 0, "k/m"),         // k = 0
        (14, 0, "k/m"),         // m = 0
        (16, 14, "index"),      // index = k + m
        (20, 0, "stripe_unit"), // low byte of 4096 is 0 already; set next byte below
        (24, 0x77, "shard_len"),
        (52, 1, "reserved"),
    ];
    for (at, val, field) in cases {
        let mut b = good;
        b[at] = val;
        if at == 20 {
            b[21] = 0; // stripe_unit = 0
        }
        match ShardHeader::parse(&reseal(b)) {
            Err(EcError::BadHeaderField { field: f }) => assert_eq!(f, field, "byte {at}"),
            other => panic!("byte {at}: {other:?}"),
        }
    }
    assert!(matches!(
        ShardHeader::parse(&good[..40]),
        Err(EcError::BadHeaderField { field: "length" })
    ));
    let mut r = Cursor::new(b"NOTASHARD-and-more-bytes".to_vec());
    assert!(matches!(read_header(&mut r), Err(EcError::BadMagic)));
}

fn encode_all(data: &[u8], k: usize, m: usize, unit: usize) -> Vec<Vec<u8>> {
    let codec = Codec::new(k, m).unwrap();
    let mut outs: Vec<Cursor<Vec<u8>>> = (0..k + m).map(|_| Cursor::new(Vec::new())).collect();
    let mut last = 0;
    let hs = encode_stream(&codec, Cursor::new(data), &mut outs, unit, &mut |n| {
        assert!(n >= last);
        last = n;
    })
    .unwrap();
    assert_eq!(last, data.len() as u64);
    assert_eq!(hs[0].original_len, data.len() as u64);
    outs.into_iter().map(|c| c.into_inner()).collect()
}

fn inputs(files: &[Vec<u8>], pick: &[usize]) -> Vec<ShardInput<Cursor<Vec<u8>>>> {
    pick.iter()
        .map(|&i| {
            let mut c = Cursor::new(files[i].clone());
            let header = read_header(&mut c).unwrap();
            ShardInput { header, reader: c }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn stream_round_trip_any_k_survivors(
        len in 0usize..40_000,
        k in 1usize..8,
        m in 1usize..5,
        unit in prop_oneof![Just(1usize), Just(7), Just(64), Just(4096)],
        seed: u64,
    ) {
        let data: Vec<u8> = (0..len).map(|i| (i as u64).wrapping_mul(seed | 1).rotate_left(17) as u8).collect();
        let files = encode_all(&data, k, m, unit);
        for f in &files {
            let h = verify_shard(Cursor::new(f), &mut |_| {}).unwrap();
            prop_assert_eq!(f.len() as u64, HEADER_LEN as u64 + h.shard_len);
        }
        // Keep a pseudo-random k of the k + m.
        let mut idx: Vec<usize> = (0..k + m).collect();
        let mut x = seed;
        for i in (1..idx.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            idx.swap(i, (x >> 33) as usize % (i + 1));
        }
        let mut ins = inputs(&files, &idx[..k]);
        let mut out = Vec::new();
        decode_stream(&mut ins, &mut out, &mut |_| {}).unwrap();
        prop_assert_eq!(out, data);
    }
}

#[test]
fn damaged_payload_truncation_and_mixing_are_typed_errors() {
    let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
    let mut files = encode_all(&data, 4, 2, 1000);
    // Payload bit flip in shard 2: verify and decode both name it.
    files[2][HEADER_LEN + 123] ^= 1;
    assert!(matches!(
        verify_shard(Cursor::new(&files[2]), &mut |_| {}),
        Err(EcError::PayloadChecksum { index: 2 })
    ));
    let mut ins = inputs(&files, &[0, 1, 2, 3]);
    assert!(matches!(
        decode_stream(&mut ins, &mut Vec::new(), &mut |_| {}),
        Err(EcError::PayloadChecksum { index: 2 })
    ));
    // Without it, decoding succeeds.
    let mut ins = inputs(&files, &[0, 1, 3, 5]);
    let mut out = Vec::new();
    decode_stream(&mut ins, &mut out, &mut |_| {}).unwrap();
    assert_eq!(out, data);
    // Truncated shard.
    let mut short = files.clone();
    short[1].truncate(HEADER_LEN + 500);
    assert!(matches!(
        verify_shard(Cursor::new(&short[1]), &mut |_| {}),
        Err(EcError::Truncated { index: 1 })
    ));
    let mut ins = inputs(&short, &[0, 1, 3, 4]);
    assert!(matches!(
        decode_stream(&mut ins, &mut Vec::new(), &mut |_| {}),
        Err(EcError::Truncated { index: 1 })
    ));
    // Trailing garbage.
    let mut long = files[0].clone();
    long.push(0);
    assert!(matches!(
        verify_shard(Cursor::new(&long), &mut |_| {}),
        Err(EcError::BadHeaderField { field: "shard_len" })
    ));
    // Duplicates, too few, mixed encodings.
    let mut ins = inputs(&files, &[0, 0, 1, 3]);
    assert!(matches!(
        decode_stream(&mut ins, &mut Vec::new(), &mut |_| {}),
        Err(EcError::DuplicateIndex { index: 0 })
    ));
    let mut ins = inputs(&files, &[0, 1, 3]);
    assert!(matches!(
        decode_stream(&mut ins, &mut Vec::new(), &mut |_| {}),
        Err(EcError::TooFewShards { have: 3, need: 4 })
    ));
    let other = encode_all(&data[..49_999], 4, 2, 1000);
    let mut ins = inputs(&files, &[0, 1, 3]);
    ins.extend(inputs(&other, &[4]));
    assert!(matches!(
        decode_stream(&mut ins, &mut Vec::new(), &mut |_| {}),
        Err(EcError::InconsistentShards { index: 4, .. })
    ));
    // A parity shard whose payload CRC is re-sealed after damage: the file CRC catches it.
    let mut forged = files.clone();
    forged[4][HEADER_LEN + 10] ^= 0x80;
    let crc = crc32c::crc32c(&forged[4][HEADER_LEN..]);
    let mut h = ShardHeader::parse(&forged[4][..HEADER_LEN]).unwrap();
    h.payload_crc = crc;
    forged[4][..HEADER_LEN].copy_from_slice(&h.to_bytes());
    let mut ins = inputs(&forged, &[0, 1, 3, 4]);
    assert!(matches!(
        decode_stream(&mut ins, &mut Vec::new(), &mut |_| {}),
        Err(EcError::FileChecksum)
    ));
}

#[test]
fn memory_stays_bounded_for_long_streams() {
    // 64 MiB through a 4+2 code with 64 KiB units: buffers are 6 x 64 KiB regardless.
    struct Zeros(u64);
    impl std::io::Read for Zeros {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            let n = (b.len() as u64).min(self.0) as usize;
            b[..n].fill(0x11);
            self.0 -= n as u64;
            Ok(n)
        }
    }
    struct Count(u64, u64);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len() as u64;
            self.1 = self.1.max(self.0);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl std::io::Seek for Count {
        fn seek(&mut self, p: std::io::SeekFrom) -> std::io::Result<u64> {
            if let std::io::SeekFrom::Start(x) = p {
                self.0 = x;
            }
            Ok(self.0)
        }
    }
    let codec = Codec::new(4, 2).unwrap();
    let mut outs: Vec<Count> = (0..6).map(|_| Count(0, 0)).collect();
    let hs = encode_stream(&codec, Zeros(64 << 20), &mut outs, 65536, &mut |_| {}).unwrap();
    assert_eq!(hs[0].shard_len, 16 << 20);
    assert!(outs.iter().all(|o| o.1 == 64 + (16 << 20)));
}
