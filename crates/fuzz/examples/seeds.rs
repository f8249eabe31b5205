//! Writes seed inputs taken from a real pool into the corpora: the checkpoint metadata block
//! of its valid context (ckpt_meta) and its process image (process_image).
//!   cargo run -p kioku-fuzz --example seeds -- POOL FUZZ_DIR

use kioku_ckpt::engine::commit_state_of;
use kioku_pool::{OpenOptions, Pool};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (pool, out) = (&args[1], std::path::Path::new(&args[2]));
    let p = Pool::open(pool.as_ref(), &OpenOptions::default()).expect("pool");
    let state = commit_state_of(&p).expect("a checkpoint pool");
    std::fs::write(out.join("corpus/process_image/seed"), &state.metadata).unwrap();
    let report = kioku_pool::inspect::inspect(pool.as_ref()).expect("inspect");
    let live = report
        .slots
        .iter()
        .find(|s| s.role == "live")
        .expect("live slot");
    let kioku_pool::examine::SlotState::Intact { slot, sections } = &live.state else {
        panic!("live slot not intact");
    };
    let valid = slot.roots[0] as usize;
    let meta = sections
        .iter()
        .find(|s| s.name == format!("ckpt.meta.{valid}"))
        .expect("metadata section");
    let bytes = p.bytes(meta.offset, slot.roots[3]);
    std::fs::write(out.join("corpus/ckpt_meta/seed"), bytes).unwrap();
}
