use crate::Engine;

/// Everything kioku-ec can refuse or fail at. Messages are one line and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum EcError {
    #[error("k={k}, m={m} is out of range: use k >= 1, m >= 1 and k + m <= 256")]
    InvalidParams { k: usize, m: usize },
    #[error("engine {0} is not available in this build or on this CPU: use Engine::best()")]
    EngineUnavailable(Engine),
    #[error("expected {expected} {what} shards, got {got}: pass exactly that many")]
    WrongShardCount {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("shard {index} is {got} bytes but the others are {expected}: give shards of one size")]
    UnequalLengths {
        index: usize,
        expected: usize,
        got: usize,
    },
    #[error("shard index {index} is out of range (the code has {total} shards): use 0..{total}")]
    IndexOutOfRange { index: usize, total: usize },
    #[error("shard index {index} is given twice: give each shard once")]
    DuplicateIndex { index: usize },
    #[error("only {have} shards survive but {need} are needed to decode: find more shards")]
    TooFewShards { have: usize, need: usize },
    #[error(
        "range {offset}+{len} exceeds the {shard_len}-byte shard: keep updates inside the shard"
    )]
    RangeOutOfBounds {
        offset: usize,
        len: usize,
        shard_len: usize,
    },
    #[error("old and new contents differ in length ({old} vs {new}): pass the same byte range")]
    DeltaLengthMismatch { old: usize, new: usize },
    #[error("decode matrix is singular, which an MDS code never gives: report this as a bug")]
    Singular,
    #[error("not a kioku shard (bad magic): pass a file written by `kioku ec encode`")]
    BadMagic,
    #[error("shard format version {0} is not supported: use a kioku that writes version 1")]
    UnsupportedVersion(u16),
    #[error("shard header checksum mismatch: the header is corrupt, use another shard")]
    HeaderChecksum,
    #[error("shard header field {field} is invalid: the header is corrupt, use another shard")]
    BadHeaderField { field: &'static str },
    #[error("shard {index} disagrees with the others on {field}: pass shards of one encoding")]
    InconsistentShards { index: usize, field: &'static str },
    #[error("shard {index} is truncated: use another shard")]
    Truncated { index: usize },
    #[error("shard {index} payload checksum mismatch: the shard is damaged, use another one")]
    PayloadChecksum { index: usize },
    #[error("rebuilt file fails its checksum: more shards are damaged than the code can tell")]
    FileChecksum,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = EcError> = std::result::Result<T, E>;
