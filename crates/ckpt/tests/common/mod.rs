//! A reproducible workload for crash tests: each epoch mutates regions (writes; now and then
//! creates, resizes or deletes one) by a plan drawn from (seed, epoch, current shape), then
//! checkpoints with the epoch as metadata. The same plan applied to an in-memory model gives
//! the exact state every checkpoint must restore.

#![allow(dead_code)]

use kioku_ckpt::{Engine, RegionOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

pub const PAGE: usize = 4096;
pub const NAMES: [&str; 4] = ["r0", "r1", "r2", "r3"];
pub const RESERVE_PAGES: usize = 64;

/// Region name → contents.
pub type Model = BTreeMap<String, Vec<u8>>;

#[derive(Debug, Clone)]
pub enum Op {
    Create { name: String, pages: usize },
    Resize { name: String, pages: usize },
    Delete { name: String },
    Write { name: String, at: usize, byte: u8 },
    Fill { name: String, page: usize, byte: u8 },
}

/// Fixed address of a region, per test (`base` keeps concurrent tests apart).
pub fn addr(base: usize, name: &str) -> usize {
    let i = NAMES.iter().position(|n| *n == name).unwrap();
    base + i * 0x4000_0000
}

pub fn region_opts(base: usize, name: &str) -> RegionOptions {
    RegionOptions {
        addr: Some(addr(base, name)),
        reserve: Some(RESERVE_PAGES * PAGE),
    }
}

/// The operations of `epoch`, given the regions' current lengths.
pub fn plan(seed: u64, epoch: u64, shape: &BTreeMap<String, usize>) -> Vec<Op> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut shape = shape.clone();
    let mut ops = Vec::new();
    if shape.is_empty() || (shape.len() < NAMES.len() && rng.gen_bool(0.15)) {
        let name = NAMES
            .iter()
            .find(|n| !shape.contains_key(**n))
            .unwrap()
            .to_string();
        let pages = rng.gen_range(1..=8);
        shape.insert(name.clone(), pages * PAGE);
        ops.push(Op::Create { name, pages });
    }
    let names: Vec<String> = shape.keys().cloned().collect();
    if rng.gen_bool(0.15) {
        let name = names[rng.gen_range(0..names.len())].clone();
        let pages = rng.gen_range(1..=16);
        shape.insert(name.clone(), pages * PAGE);
        ops.push(Op::Resize { name, pages });
    }
    if shape.len() > 1 && rng.gen_bool(0.07) {
        let name = names[rng.gen_range(0..names.len())].clone();
        shape.remove(&name);
        ops.push(Op::Delete { name });
    }
    let names: Vec<String> = shape.keys().cloned().collect();
    for _ in 0..rng.gen_range(1..24) {
        let name = names[rng.gen_range(0..names.len())].clone();
        let len = shape[&name];
        if rng.gen_bool(0.1) {
            ops.push(Op::Fill {
                name,
                page: rng.gen_range(0..len / PAGE),
                byte: rng.gen(),
            });
        } else {
            ops.push(Op::Write {
                name,
                at: rng.gen_range(0..len),
                byte: rng.gen(),
            });
        }
    }
    ops
}

pub fn shape_of(model: &Model) -> BTreeMap<String, usize> {
    model.iter().map(|(k, v)| (k.clone(), v.len())).collect()
}

pub fn apply_to_model(model: &mut Model, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Create { name, pages } => {
                model.insert(name.clone(), vec![0; pages * PAGE]);
            }
            Op::Resize { name, pages } => model.get_mut(name).unwrap().resize(pages * PAGE, 0),
            Op::Delete { name } => {
                model.remove(name);
            }
            Op::Write { name, at, byte } => model.get_mut(name).unwrap()[*at] = *byte,
            Op::Fill { name, page, byte } => {
                model.get_mut(name).unwrap()[page * PAGE..(page + 1) * PAGE].fill(*byte)
            }
        }
    }
}

// The engine hands out regions as raw addresses of shared mappings it owns; tying the slice
// to a shared borrow of the engine keeps it from outliving the mapping.
#[allow(clippy::mut_from_ref)]
pub fn region_mem<'a>(engine: &'a Engine, name: &str) -> &'a mut [u8] {
    let r = engine
        .region(name)
        .unwrap_or_else(|| panic!("region {name} missing"));
    // SAFETY: the region is mapped for `len` bytes while the engine lives; the slice does not
    // outlive the borrow of the engine.
    unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), r.len) }
}

pub fn apply_to_engine(engine: &mut Engine, base: usize, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Create { name, pages } => {
                engine
                    .create_region(name, pages * PAGE, region_opts(base, name))
                    .unwrap();
            }
            Op::Resize { name, pages } => {
                engine.resize_region(name, pages * PAGE).unwrap();
            }
            Op::Delete { name } => engine.delete_region(name).unwrap(),
            Op::Write { name, at, byte } => region_mem(engine, name)[*at] = *byte,
            Op::Fill { name, page, byte } => {
                region_mem(engine, name)[page * PAGE..(page + 1) * PAGE].fill(*byte)
            }
        }
    }
}

/// One epoch of the workload on an engine: plan, apply, checkpoint with the epoch as metadata.
pub fn run_epoch(engine: &mut Engine, base: usize, seed: u64) -> u64 {
    let epoch = engine.epoch() + 1;
    let shape: BTreeMap<String, usize> = engine
        .regions()
        .into_iter()
        .map(|r| (r.name, r.len))
        .collect();
    let ops = plan(seed, epoch, &shape);
    apply_to_engine(engine, base, &ops);
    let stats = engine.checkpoint(&epoch.to_le_bytes()).unwrap();
    assert_eq!(stats.epoch, epoch);
    epoch
}

/// Advances `model` (at epoch `at`) to epoch `to`.
pub fn advance_model(model: &mut Model, at: &mut u64, to: u64, seed: u64) {
    while *at < to {
        *at += 1;
        let ops = plan(seed, *at, &shape_of(model));
        apply_to_model(model, &ops);
    }
}

/// Asserts that the engine holds exactly `model`.
pub fn assert_matches(engine: &Engine, model: &Model, what: &str) {
    let names: Vec<String> = engine.regions().into_iter().map(|r| r.name).collect();
    let want: Vec<String> = model.keys().cloned().collect();
    assert_eq!(
        names.iter().collect::<std::collections::BTreeSet<_>>(),
        want.iter().collect(),
        "{what}: regions"
    );
    for (name, bytes) in model {
        let got = region_mem(engine, name);
        if got != bytes.as_slice() {
            let first = got.iter().zip(bytes).position(|(a, b)| a != b);
            panic!(
                "{what}: region {name} differs (len {} vs {}, first difference at {first:?})",
                got.len(),
                bytes.len()
            );
        }
    }
}
