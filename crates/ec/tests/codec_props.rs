//! Property tests of the codec: engines agree with each other and with ISA-L's own
//! encoder, every erasure pattern decodes, delta updates and accumulation equal encoding.

use kioku_ec::{Codec, EcError, Engine};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn rand_shards(rng: &mut ChaCha8Rng, n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| {
            let mut v = vec![0u8; len];
            rng.fill(&mut v[..]);
            v
        })
        .collect()
}

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|x| x.as_slice()).collect()
}

fn encode(c: &Codec, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    c.encode_to_vec(&refs(data)).unwrap()
}

/// Parity computed straight from the definition, one byte at a time.
fn reference_parity(k: usize, m: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    (0..m)
        .map(|j| {
            (0..len)
                .map(|x| {
                    (0..k).fold(0u8, |acc, i| {
                        acc ^ kioku_ec::gf::mul(kioku_ec::gf::inv(((k + j) ^ i) as u8), data[i][x])
                    })
                })
                .collect()
        })
        .collect()
}

fn km() -> impl Strategy<Value = (usize, usize)> {
    prop_oneof![
        (1usize..=20, 1usize..=8),
        (1usize..=255).prop_flat_map(|k| (Just(k), 1..=(256 - k))),
        Just((200usize, 56usize)),
        Just((255usize, 1usize)),
        Just((1usize, 255usize)),
    ]
}

fn len_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..=100,
        100usize..=5000,
        Just(4096usize),
        Just(65536usize)
    ]
}

#[test]
fn active_engine_is_the_fastest_available() {
    let avail = Engine::available();
    assert_eq!(Codec::new(3, 2).unwrap().engine(), avail[0]);
    assert!(avail.contains(&Engine::Scalar));
    assert_eq!(avail.contains(&Engine::Isal), cfg!(kioku_isal));
    if cfg!(feature = "isal") && std::env::var_os("KIOKU_EC_NO_ISAL").is_none() {
        // The tests need ISA-L (scripts/apt-packages.txt) so that it is what gets compared.
        assert!(
            avail.contains(&Engine::Isal),
            "ISA-L not linked: run scripts/deps.sh"
        );
    }
}

#[test]
fn matrix_is_isal_cauchy1() {
    #[cfg(kioku_isal)]
    for (k, m) in [
        (1, 1),
        (8, 2),
        (10, 4),
        (32, 2),
        (200, 56),
        (255, 1),
        (1, 255),
        (128, 128),
    ] {
        let c = Codec::new(k, m).unwrap();
        let full = kioku_ec::isal_raw::gen_cauchy1_matrix(k, m);
        assert_eq!(&full[k * k..], c.parity_matrix(), "k={k} m={m}");
    }
}

#[test]
fn matches_reference_definition() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (k, m, len) in [(3, 2, 77), (10, 4, 1000), (17, 9, 33), (1, 3, 64)] {
        let data = rand_shards(&mut rng, k, len);
        let want = reference_parity(k, m, &data);
        for e in Engine::available() {
            let c = Codec::with_engine(k, m, e).unwrap();
            assert_eq!(encode(&c, &data), want, "engine {e} k={k} m={m} len={len}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every engine gives the same bytes, and so does ISA-L's own ec_encode_data.
    #[test]
    fn engines_agree_with_each_other_and_isal((k, m) in km(), len in len_strategy(), seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data = rand_shards(&mut rng, k, len);
        let base = encode(&Codec::with_engine(k, m, Engine::Scalar).unwrap(), &data);
        for e in Engine::available() {
            let c = Codec::with_engine(k, m, e).unwrap();
            prop_assert_eq!(&encode(&c, &data), &base, "engine {}", e);
        }
        #[cfg(kioku_isal)]
        if len > 0 {
            let full = kioku_ec::isal_raw::gen_cauchy1_matrix(k, m);
            let tables = kioku_ec::isal_raw::init_tables(k, m, &full[k * k..]);
            let mut out = vec![vec![0u8; len]; m];
            let mut o: Vec<&mut [u8]> = out.iter_mut().map(|v| v.as_mut_slice()).collect();
            kioku_ec::isal_raw::encode(&tables, &refs(&data), &mut o);
            prop_assert_eq!(&out, &base);
        }
    }

    /// Random erasure patterns of up to m shards, data and parity, rebuild exactly.
    #[test]
    fn random_erasures_rebuild((k, m) in km(), len in 0usize..=600, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data = rand_shards(&mut rng, k, len);
        for e in Engine::available() {
            let c = Codec::with_engine(k, m, e).unwrap();
            let parity = encode(&c, &data);
            let all: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
            let lost_n = rng.gen_range(0..=m);
            let mut idx: Vec<usize> = (0..k + m).collect();
            for i in 0..lost_n {
                let j = rng.gen_range(i..k + m);
                idx.swap(i, j);
            }
            let mut shards: Vec<Option<Vec<u8>>> = all.iter().cloned().map(Some).collect();
            for &i in &idx[..lost_n] {
                shards[i] = None;
            }
            c.reconstruct_vecs(&mut shards).unwrap();
            for i in 0..k + m {
                prop_assert_eq!(shards[i].as_ref().unwrap(), &all[i], "engine {} shard {}", e, i);
            }
        }
    }

    /// encode(new) == update(encode(old), old, new) for a random range of one shard.
    #[test]
    fn delta_update_equals_reencode((k, m) in km(), len in 1usize..=3000, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let old = rand_shards(&mut rng, k, len);
        let i = rng.gen_range(0..k);
        let a = rng.gen_range(0..len);
        let b = rng.gen_range(a..=len);
        let mut new = old.clone();
        rng.fill(&mut new[i][a..b]);
        for e in Engine::available() {
            let c = Codec::with_engine(k, m, e).unwrap();
            let want = encode(&c, &new);
            let mut p1 = encode(&c, &old);
            let mut r: Vec<&mut [u8]> = p1.iter_mut().map(|v| v.as_mut_slice()).collect();
            c.update(i, a, &old[i][a..b], &new[i][a..b], &mut r).unwrap();
            prop_assert_eq!(&p1, &want, "update, engine {}", e);
            let delta: Vec<u8> = old[i][a..b].iter().zip(&new[i][a..b]).map(|(x, y)| x ^ y).collect();
            let mut p2 = encode(&c, &old);
            let mut r: Vec<&mut [u8]> = p2.iter_mut().map(|v| v.as_mut_slice()).collect();
            c.update_delta(i, a, &delta, &mut r).unwrap();
            prop_assert_eq!(&p2, &want, "update_delta, engine {}", e);
        }
    }

    /// Pipelined accumulation in any order, all rows or one row at a time, equals encode.
    #[test]
    fn accumulation_equals_encode((k, m) in km(), len in 0usize..=2000, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data = rand_shards(&mut rng, k, len);
        let mut order: Vec<usize> = (0..k).collect();
        for i in (1..k).rev() {
            let j = rng.gen_range(0..=i);
            order.swap(i, j);
        }
        for e in Engine::available() {
            let c = Codec::with_engine(k, m, e).unwrap();
            let want = encode(&c, &data);
            let mut acc = vec![vec![0u8; len]; m];
            for &i in &order {
                let mut r: Vec<&mut [u8]> = acc.iter_mut().map(|v| v.as_mut_slice()).collect();
                c.accumulate(i, &data[i], &mut r).unwrap();
            }
            prop_assert_eq!(&acc, &want, "accumulate, engine {}", e);
            let j = rng.gen_range(0..m);
            let mut row = vec![0u8; len];
            for &i in &order {
                c.accumulate_row(j, i, &data[i], &mut row).unwrap();
            }
            prop_assert_eq!(&row, &want[j], "accumulate_row, engine {}", e);
        }
    }
}

/// Every erasure pattern of at most m shards, for every k + m <= 8.
#[test]
fn every_erasure_pattern_small_codes() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for n in 2..=8usize {
        for m in 1..n {
            let k = n - m;
            let data = rand_shards(&mut rng, k, 67);
            for e in Engine::available() {
                let c = Codec::with_engine(k, m, e).unwrap();
                let parity = encode(&c, &data);
                let all: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
                for mask in 0u32..(1 << n) {
                    let lost = mask.count_ones() as usize;
                    let mut shards: Vec<Option<Vec<u8>>> = (0..n)
                        .map(|i| (mask & (1 << i) == 0).then(|| all[i].clone()))
                        .collect();
                    let r = c.reconstruct_vecs(&mut shards);
                    if lost > m {
                        assert!(
                            matches!(r, Err(EcError::TooFewShards { have, need }) if have == n - lost && need == k),
                            "k={k} m={m} mask={mask:b}: {r:?}"
                        );
                    } else {
                        r.unwrap();
                        for i in 0..n {
                            assert_eq!(
                                shards[i].as_ref().unwrap(),
                                &all[i],
                                "k={k} m={m} mask={mask:b} i={i} {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// All m data shards lost for the widest code, and the decode cache on and off agree.
#[test]
fn widest_code_and_cache() {
    let (k, m) = (200, 56);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let data = rand_shards(&mut rng, k, 333);
    let c = Codec::new(k, m).unwrap();
    let parity = encode(&c, &data);
    for cache in [64, 0, 64] {
        c.set_decode_cache_capacity(cache);
        for start in [0, 100, 144] {
            let surv: Vec<(usize, &[u8])> = (0..k + m)
                .filter(|i| !(start..start + m).contains(i))
                .map(|i| {
                    (
                        i,
                        if i < k {
                            &data[i][..]
                        } else {
                            &parity[i - k][..]
                        },
                    )
                })
                .collect();
            let mut out = vec![vec![0u8; 333]; m];
            let mut want: Vec<(usize, &mut [u8])> = out
                .iter_mut()
                .enumerate()
                .map(|(t, b)| (start + t, b.as_mut_slice()))
                .collect();
            // Shuffled order of wanted buffers must not matter.
            want.reverse();
            c.decode(&surv, &mut want).unwrap();
            for (t, b) in out.iter().enumerate() {
                let i = start + t;
                let exp = if i < k { &data[i] } else { &parity[i - k] };
                assert_eq!(b, exp, "cache={cache} start={start} i={i}");
            }
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    for (k, m) in [(0, 1), (1, 0), (200, 57), (256, 1), (0, 0)] {
        assert!(
            matches!(Codec::new(k, m), Err(EcError::InvalidParams { .. })),
            "{k} {m}"
        );
    }
    assert!(Codec::new(255, 1).is_ok() && Codec::new(1, 255).is_ok());
    let c = Codec::new(3, 2).unwrap();
    let a = vec![1u8; 10];
    let b = vec![2u8; 11];
    let mut p = vec![vec![0u8; 10]; 2];
    let mut pr: Vec<&mut [u8]> = p.iter_mut().map(|v| v.as_mut_slice()).collect();
    assert!(matches!(
        c.encode(&[&a, &b, &a], &mut pr),
        Err(EcError::UnequalLengths {
            index: 1,
            expected: 10,
            got: 11
        })
    ));
    assert!(matches!(
        c.encode(&[&a, &a], &mut pr),
        Err(EcError::WrongShardCount {
            what: "data",
            expected: 3,
            got: 2
        })
    ));
    c.encode(&[&a, &a, &a], &mut pr).unwrap();
    // Decode: duplicates, out of range, too few, unequal.
    let mut out = [0u8; 10];
    let s: Vec<(usize, &[u8])> = vec![(0, &a), (0, &a), (1, &a)];
    assert!(matches!(
        c.decode(&s, &mut [(2, &mut out[..])]),
        Err(EcError::DuplicateIndex { index: 0 })
    ));
    let s: Vec<(usize, &[u8])> = vec![(0, &a), (1, &a), (9, &a)];
    assert!(matches!(
        c.decode(&s, &mut [(2, &mut out[..])]),
        Err(EcError::IndexOutOfRange { index: 9, total: 5 })
    ));
    let s: Vec<(usize, &[u8])> = vec![(0, &a), (1, &a)];
    assert!(matches!(
        c.decode(&s, &mut [(2, &mut out[..])]),
        Err(EcError::TooFewShards { have: 2, need: 3 })
    ));
    let s: Vec<(usize, &[u8])> = vec![(0, &a), (1, &a), (3, &b)];
    assert!(matches!(
        c.decode(&s, &mut [(2, &mut out[..])]),
        Err(EcError::UnequalLengths { index: 3, .. })
    ));
    let s: Vec<(usize, &[u8])> = vec![(0, &a), (1, &a), (3, &a)];
    assert!(matches!(
        c.decode(&s, &mut [(1, &mut out[..])]),
        Err(EcError::DuplicateIndex { index: 1 })
    ));
    // Updates: range, index, lengths.
    assert!(matches!(
        c.update(0, 5, &a[..6], &a[..6], &mut pr),
        Err(EcError::RangeOutOfBounds {
            offset: 5,
            len: 6,
            shard_len: 10
        })
    ));
    assert!(matches!(
        c.update(3, 0, &a[..1], &a[..1], &mut pr),
        Err(EcError::IndexOutOfRange { index: 3, .. })
    ));
    assert!(matches!(
        c.update(0, 0, &a[..1], &a[..2], &mut pr),
        Err(EcError::DeltaLengthMismatch { old: 1, new: 2 })
    ));
    assert!(matches!(
        c.accumulate(0, &a[..5], &mut pr),
        Err(EcError::UnequalLengths { .. })
    ));
    let mut row = vec![0u8; 10];
    assert!(matches!(
        c.accumulate_row(2, 0, &a, &mut row),
        Err(EcError::IndexOutOfRange { index: 5, .. })
    ));
    // Messages are one line.
    let e = Codec::new(0, 1).unwrap_err().to_string();
    assert!(!e.contains('\n') && e.contains("k + m <= 256"), "{e}");
}
