//! The systematic Reed–Solomon codec: encode, decode, delta update, accumulation.

use crate::engine::{Engine, Plan};
use crate::error::{EcError, Result};
use crate::gf;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Largest total shard count, `k + m` (GF(2^8) has 256 elements).
pub const MAX_SHARDS: usize = 256;

/// Decode plans kept per codec unless changed with [`Codec::set_decode_cache_capacity`].
pub const DEFAULT_DECODE_CACHE: usize = 64;

type Bits = [u64; 4];

fn set_bit(b: &mut Bits, i: usize) {
    b[i / 64] |= 1 << (i % 64);
}

struct DecodeCache {
    capacity: usize,
    plans: HashMap<(Bits, Bits), Arc<Plan>>,
}

/// A systematic Reed–Solomon code over GF(2^8): `k` data shards, `m` parity shards,
/// any `k` of the `k + m` recover all of them. Parity `j` is `sum_i C[j][i] * data_i` with
/// the Cauchy matrix `C[j][i] = 1 / ((k + j) xor i)` (ISA-L's `gf_gen_cauchy1_matrix`).
///
/// Shards are indexed `0..k` (data) then `k..k+m` (parity). All methods take shards of
/// one length; any length works, including 0. `Codec` is `Send + Sync`.
pub struct Codec {
    k: usize,
    m: usize,
    parity: Vec<u8>,
    enc: Plan,
    cache: Mutex<DecodeCache>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("k", &self.k)
            .field("m", &self.m)
            .field("engine", &self.enc.engine)
            .finish()
    }
}

fn check_len(index: usize, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(EcError::UnequalLengths {
            index,
            expected,
            got,
        });
    }
    Ok(())
}

impl Codec {
    /// A `k + m` code on the fastest engine available ([`Engine::best`]).
    pub fn new(k: usize, m: usize) -> Result<Codec> {
        Codec::with_engine(k, m, Engine::best())
    }

    /// A `k + m` code on a chosen engine; fails if the engine is not available here.
    pub fn with_engine(k: usize, m: usize, engine: Engine) -> Result<Codec> {
        if k == 0 || m == 0 || k + m > MAX_SHARDS {
            return Err(EcError::InvalidParams { k, m });
        }
        if !engine.is_available() {
            return Err(EcError::EngineUnavailable(engine));
        }
        let parity = gf::cauchy_parity_matrix(k, m);
        let enc = Plan::new(engine, m, k, parity.clone());
        tracing::debug!(k, m, %engine, "reed-solomon codec ready");
        Ok(Codec {
            k,
            m,
            parity,
            enc,
            cache: Mutex::new(DecodeCache {
                capacity: DEFAULT_DECODE_CACHE,
                plans: HashMap::new(),
            }),
        })
    }

    /// Number of data shards.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Number of parity shards.
    pub fn m(&self) -> usize {
        self.m
    }
    /// The engine doing the arithmetic.
    pub fn engine(&self) -> Engine {
        self.enc.engine
    }
    /// The `m x k` parity coefficient matrix, row-major.
    pub fn parity_matrix(&self) -> &[u8] {
        &self.parity
    }
    /// `C[parity][data]`, the coefficient of data shard `data` in parity shard `parity`
    /// (`parity` counts from 0 within the parity shards).
    pub fn coefficient(&self, parity: usize, data: usize) -> u8 {
        self.parity[parity * self.k + data]
    }

    /// Sets how many decode plans (one per erasure pattern) are cached; 0 turns the cache
    /// off. Building a plan costs a small matrix inversion, O(lost^2 * k).
    pub fn set_decode_cache_capacity(&self, capacity: usize) {
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        c.capacity = capacity;
        if c.plans.len() > capacity {
            c.plans.clear();
        }
    }

    /// Computes the `m` parity shards of `k` data shards.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<()> {
        if data.len() != self.k {
            return Err(EcError::WrongShardCount {
                what: "data",
                expected: self.k,
                got: data.len(),
            });
        }
        if parity.len() != self.m {
            return Err(EcError::WrongShardCount {
                what: "parity",
                expected: self.m,
                got: parity.len(),
            });
        }
        let len = data[0].len();
        for (i, d) in data.iter().enumerate() {
            check_len(i, len, d.len())?;
        }
        for (j, p) in parity.iter().enumerate() {
            check_len(self.k + j, len, p.len())?;
        }
        self.enc.dot(data, parity);
        Ok(())
    }

    /// Convenience: encodes `k` data shards into newly allocated parity shards.
    pub fn encode_to_vec(&self, data: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let len = data.first().map_or(0, |d| d.len());
        let mut out = vec![vec![0u8; len]; self.m];
        let mut refs: Vec<&mut [u8]> = out.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.encode(data, &mut refs)?;
        Ok(out)
    }

    fn check_parity_range(
        &self,
        data_index: usize,
        offset: usize,
        len: usize,
        parity: &[&mut [u8]],
    ) -> Result<()> {
        if data_index >= self.k {
            return Err(EcError::IndexOutOfRange {
                index: data_index,
                total: self.k,
            });
        }
        if parity.len() != self.m {
            return Err(EcError::WrongShardCount {
                what: "parity",
                expected: self.m,
                got: parity.len(),
            });
        }
        let shard_len = parity[0].len();
        for (j, p) in parity.iter().enumerate() {
            check_len(self.k + j, shard_len, p.len())?;
        }
        if !matches!(offset.checked_add(len), Some(end) if end <= shard_len) {
            return Err(EcError::RangeOutOfBounds {
                offset,
                len,
                shard_len,
            });
        }
        Ok(())
    }

    /// Delta update from the XOR of old and new contents: for bytes
    /// `offset..offset + delta.len()` of data shard `data_index`, changed by
    /// `delta = old ^ new`, updates those bytes of every parity shard in place
    /// (`parity_j ^= C[j][i] * delta`). `parity` are the full parity shards.
    pub fn update_delta(
        &self,
        data_index: usize,
        offset: usize,
        delta: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<()> {
        self.check_parity_range(data_index, offset, delta.len(), parity)?;
        let n = delta.len();
        let mut win: Vec<&mut [u8]> = parity
            .iter_mut()
            .map(|p| &mut p[offset..offset + n])
            .collect();
        self.enc.mad(data_index, delta, &mut win);
        Ok(())
    }

    /// Delta update from old and new contents of bytes `offset..offset + old.len()` of data
    /// shard `data_index`; see [`Codec::update_delta`]. Only that range of parity is touched.
    pub fn update(
        &self,
        data_index: usize,
        offset: usize,
        old: &[u8],
        new: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<()> {
        if old.len() != new.len() {
            return Err(EcError::DeltaLengthMismatch {
                old: old.len(),
                new: new.len(),
            });
        }
        self.check_parity_range(data_index, offset, old.len(), parity)?;
        const STEP: usize = 64 * 1024;
        let mut delta = vec![0u8; STEP.min(old.len())];
        let mut off = 0;
        while off < old.len() {
            let n = STEP.min(old.len() - off);
            let d = &mut delta[..n];
            xor_into(d, &old[off..off + n], &new[off..off + n]);
            let at = offset + off;
            let mut win: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[at..at + n]).collect();
            self.enc.mad(data_index, d, &mut win);
            off += n;
        }
        Ok(())
    }

    /// Pipelined encoding: adds data shard `data_index`'s contribution `C[j][i] * data` to
    /// every running parity buffer `partial[j]` (all `m` of them). Starting from zeroed
    /// buffers and adding every data shard once, in any order, gives the parity.
    pub fn accumulate(
        &self,
        data_index: usize,
        data: &[u8],
        partial: &mut [&mut [u8]],
    ) -> Result<()> {
        if let Some(p) = partial.first() {
            // Pipelines add whole shards, not a prefix.
            check_len(data_index, p.len(), data.len())?;
        }
        self.update_delta(data_index, 0, data, partial)
    }

    /// Pipelined encoding of a single parity shard: `partial ^= C[parity][data_index] * data`,
    /// the step one node performs on the running buffer it received.
    pub fn accumulate_row(
        &self,
        parity: usize,
        data_index: usize,
        data: &[u8],
        partial: &mut [u8],
    ) -> Result<()> {
        if parity >= self.m {
            return Err(EcError::IndexOutOfRange {
                index: self.k + parity,
                total: self.k + self.m,
            });
        }
        if data_index >= self.k {
            return Err(EcError::IndexOutOfRange {
                index: data_index,
                total: self.k,
            });
        }
        check_len(data_index, partial.len(), data.len())?;
        let c = self.coefficient(parity, data_index);
        let plan = self.single_plan(c);
        plan.mad(0, data, &mut [partial]);
        Ok(())
    }

    fn single_plan(&self, c: u8) -> Plan {
        Plan::new(self.enc.engine, 1, 1, vec![c])
    }

    /// Rebuilds shards from survivors. `survivors` are `(index, contents)` pairs, at least
    /// `k` of them, indices in `0..k+m`; `wanted` are `(index, buffer)` pairs to fill, data
    /// or parity, none of them a survivor. Uses the first `k` survivors in the order data,
    /// then parity by index.
    pub fn decode(
        &self,
        survivors: &[(usize, &[u8])],
        wanted: &mut [(usize, &mut [u8])],
    ) -> Result<()> {
        let n = self.k + self.m;
        let mut have: Bits = [0; 4];
        let mut len = None;
        for (idx, s) in survivors {
            if *idx >= n {
                return Err(EcError::IndexOutOfRange {
                    index: *idx,
                    total: n,
                });
            }
            if have[idx / 64] & (1 << (idx % 64)) != 0 {
                return Err(EcError::DuplicateIndex { index: *idx });
            }
            set_bit(&mut have, *idx);
            let l = *len.get_or_insert(s.len());
            check_len(*idx, l, s.len())?;
        }
        let mut want: Bits = [0; 4];
        for (idx, w) in wanted.iter() {
            if *idx >= n {
                return Err(EcError::IndexOutOfRange {
                    index: *idx,
                    total: n,
                });
            }
            if (have[idx / 64] | want[idx / 64]) & (1 << (idx % 64)) != 0 {
                return Err(EcError::DuplicateIndex { index: *idx });
            }
            set_bit(&mut want, *idx);
            let l = *len.get_or_insert(w.len());
            check_len(*idx, l, w.len())?;
        }
        if survivors.len() < self.k {
            return Err(EcError::TooFewShards {
                have: survivors.len(),
                need: self.k,
            });
        }
        if wanted.is_empty() {
            return Ok(());
        }
        // The k inputs: every surviving data shard, then parity by ascending index.
        let inputs: Vec<usize> = (0..n)
            .filter(|i| have[i / 64] & (1 << (i % 64)) != 0)
            .take(self.k)
            .collect();
        let mut used: Bits = [0; 4];
        for &i in &inputs {
            set_bit(&mut used, i);
        }
        let plan = self.decode_plan(used, want, &inputs)?;
        let mut by_index: [Option<&[u8]>; MAX_SHARDS] = [None; MAX_SHARDS];
        for (i, s) in survivors {
            by_index[*i] = Some(*s);
        }
        let srcs: Vec<&[u8]> = inputs
            .iter()
            .map(|&i| by_index[i].expect("input is a survivor"))
            .collect();
        // Plan rows are in ascending wanted index.
        let mut sorted: Vec<(usize, &mut [u8])> =
            wanted.iter_mut().map(|(i, b)| (*i, &mut **b)).collect();
        sorted.sort_unstable_by_key(|w| w.0);
        let mut dsts: Vec<&mut [u8]> = sorted.into_iter().map(|(_, b)| b).collect();
        plan.dot(&srcs, &mut dsts);
        Ok(())
    }

    fn decode_plan(&self, used: Bits, want: Bits, inputs: &[usize]) -> Result<Arc<Plan>> {
        let key = (used, want);
        {
            let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = c.plans.get(&key) {
                return Ok(p.clone());
            }
        }
        let plan = Arc::new(self.build_decode_plan(want, inputs)?);
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.capacity > 0 {
            if c.plans.len() >= c.capacity {
                c.plans.clear();
            }
            c.plans.insert(key, plan.clone());
        }
        Ok(plan)
    }

    /// Rows (one per wanted index, ascending) over the k `inputs` (ascending).
    fn build_decode_plan(&self, want: Bits, inputs: &[usize]) -> Result<Plan> {
        let (k, m) = (self.k, self.m);
        let c = |j: usize, i: usize| self.parity[j * k + i];
        let present: Vec<usize> = inputs.iter().copied().filter(|&i| i < k).collect();
        let par: Vec<usize> = inputs.iter().filter(|&&i| i >= k).map(|&i| i - k).collect();
        let lost: Vec<usize> = (0..k).filter(|i| !present.contains(i)).collect();
        let nl = lost.len();
        debug_assert_eq!(nl, par.len());
        // Sub-system on the lost data: C[par][lost] d_lost = p_par + C[par][present] d_present.
        let sub: Vec<u8> = par
            .iter()
            .flat_map(|&j| lost.iter().map(move |&i| (j, i)))
            .map(|(j, i)| c(j, i))
            .collect();
        let sub_inv = gf::invert(&sub, nl).ok_or(EcError::Singular)?;
        let cp: Vec<u8> = par
            .iter()
            .flat_map(|&j| present.iter().map(move |&i| (j, i)))
            .map(|(j, i)| c(j, i))
            .collect();
        let np = present.len();
        // d_lost = R_data * d_present + R_par * p_par.
        let r_data = gf::matmul(&sub_inv, &cp, nl, nl, np);
        let r_par = &sub_inv;
        let col_of = |idx: usize| inputs.binary_search(&idx).expect("input index");
        let mut rows = Vec::new();
        let mut nrows = 0;
        for w in 0..k + m {
            if want[w / 64] & (1 << (w % 64)) == 0 {
                continue;
            }
            nrows += 1;
            let mut row = vec![0u8; k];
            if w < k {
                let l = lost.binary_search(&w).expect("wanted data is lost");
                for (t, &i) in present.iter().enumerate() {
                    row[col_of(i)] = r_data[l * np + t];
                }
                for (t, &j) in par.iter().enumerate() {
                    row[col_of(k + j)] = r_par[l * nl + t];
                }
            } else {
                // Parity j = C[j][present] d_present + C[j][lost] d_lost, d_lost as above.
                let j = w - k;
                for (t, &i) in present.iter().enumerate() {
                    let mut v = c(j, i);
                    for (l, &li) in lost.iter().enumerate() {
                        v ^= gf::mul(c(j, li), r_data[l * np + t]);
                    }
                    row[col_of(i)] = v;
                }
                for (t, &pj) in par.iter().enumerate() {
                    let mut v = 0;
                    for (l, &li) in lost.iter().enumerate() {
                        v ^= gf::mul(c(j, li), r_par[l * nl + t]);
                    }
                    row[col_of(k + pj)] = v;
                }
            }
            rows.extend_from_slice(&row);
        }
        Ok(Plan::new(self.enc.engine, nrows, k, rows))
    }

    /// Rebuilds every missing shard in place. `shards` holds all `k + m` shards, one size;
    /// `present[i]` tells whether shard `i` holds valid contents. Missing ones are
    /// overwritten. Fails with [`EcError::TooFewShards`] when fewer than `k` are present.
    pub fn reconstruct(&self, shards: &mut [&mut [u8]], present: &[bool]) -> Result<()> {
        self.reconstruct_some(shards, present, self.k + self.m)
    }

    /// Like [`Codec::reconstruct`] but rebuilds only missing data shards.
    pub fn reconstruct_data(&self, shards: &mut [&mut [u8]], present: &[bool]) -> Result<()> {
        self.reconstruct_some(shards, present, self.k)
    }

    fn reconstruct_some(
        &self,
        shards: &mut [&mut [u8]],
        present: &[bool],
        upto: usize,
    ) -> Result<()> {
        let n = self.k + self.m;
        if shards.len() != n || present.len() != n {
            return Err(EcError::WrongShardCount {
                what: "total",
                expected: n,
                got: shards.len().min(present.len()),
            });
        }
        let mut surv: Vec<(usize, &[u8])> = Vec::with_capacity(n);
        let mut want: Vec<(usize, &mut [u8])> = Vec::new();
        for (i, s) in shards.iter_mut().enumerate() {
            if present[i] {
                surv.push((i, &**s));
            } else if i < upto {
                want.push((i, &mut **s));
            }
        }
        if surv.len() < self.k {
            return Err(EcError::TooFewShards {
                have: surv.len(),
                need: self.k,
            });
        }
        self.decode(&surv, &mut want)
    }

    /// Convenience: fills every `None` in `shards` (length `k + m`) from the others.
    pub fn reconstruct_vecs(&self, shards: &mut [Option<Vec<u8>>]) -> Result<()> {
        let n = self.k + self.m;
        if shards.len() != n {
            return Err(EcError::WrongShardCount {
                what: "total",
                expected: n,
                got: shards.len(),
            });
        }
        let len = shards.iter().flatten().map(|s| s.len()).next().unwrap_or(0);
        let present: Vec<bool> = shards.iter().map(|s| s.is_some()).collect();
        let have = present.iter().filter(|p| **p).count();
        if have < self.k {
            return Err(EcError::TooFewShards { have, need: self.k });
        }
        let mut bufs: Vec<Vec<u8>> = shards
            .iter_mut()
            .map(|s| s.take().unwrap_or_else(|| vec![0u8; len]))
            .collect();
        let res = {
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            self.reconstruct(&mut refs, &present)
        };
        for (slot, (b, p)) in shards.iter_mut().zip(bufs.into_iter().zip(&present)) {
            if res.is_ok() || *p {
                *slot = Some(b);
            }
        }
        res
    }
}

/// `out = a ^ b`.
pub(crate) fn xor_into(out: &mut [u8], a: &[u8], b: &[u8]) {
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x ^ y;
    }
}
