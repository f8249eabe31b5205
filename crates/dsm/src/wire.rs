//! The DSM's messages over MCAPI, as bytes: every message is type-, length- and range-checked
//! on decode, so a malformed one is a typed error and never a panic.

/// Which endpoint of the requester a reply goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyTo {
    /// The compute thread (barriers, locks, diffs).
    Compute,
    /// The fault thread (page fetches).
    Fault,
}

/// Why nodes meet at the barrier manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierKind {
    /// `init`: the nodes compare their configuration.
    Init,
    /// An application barrier.
    Barrier,
    /// `finalize`.
    Finalize,
    /// Either barrier of a checkpoint.
    Checkpoint,
    /// Either barrier of a rollback.
    Rollback,
}

/// One message of the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// To a page's home: send me the home copy.
    PageGet { page: u32, reply: ReplyTo },
    /// From the home: the page's bytes.
    Page { page: u32, data: Vec<u8> },
    /// To a page's home: apply these diffs (encoded by `diff::encode`), then acknowledge.
    Diffs { body: Vec<u8> },
    /// From the home: the diffs of one `Diffs` were applied.
    DiffAck,
    /// To the barrier manager (node 0).
    Arrive {
        kind: BarrierKind,
        epoch: u64,
        /// What every node must agree on (configuration, allocations), as a digest.
        check: u64,
        /// Pages this node wrote since the last barrier.
        notices: Vec<u32>,
    },
    /// From the barrier manager: everybody arrived; the pages each node wrote.
    Depart {
        epoch: u64,
        notices: Vec<(u32, Vec<u32>)>,
    },
    /// To a lock's manager.
    Acquire { lock: u32, epoch: u64 },
    /// From the lock's manager: you hold it; the pages written under it since `epoch`.
    Grant { lock: u32, notices: Vec<u32> },
    /// To a lock's manager: the pages written while holding it.
    Release {
        lock: u32,
        epoch: u64,
        notices: Vec<u32>,
    },
    /// From a manager: the request cannot be honoured (the text says why).
    Refuse { text: String },
    /// From a node to its own receive thread: stop.
    Stop,
    /// To the buddy: bytes `offset..` of this node's checkpoint image of `epoch`.
    /// With `handover`: from the buddy to a node taking over, its own image.
    ImageChunk {
        handover: bool,
        epoch: u64,
        offset: u64,
        data: Vec<u8>,
    },
    /// To the buddy: the image of `epoch` is complete: `len` bytes with this CRC-32C.
    ImageEnd {
        handover: bool,
        epoch: u64,
        len: u64,
        crc: u32,
    },
    /// From the buddy: the image of `epoch` is held, complete, in its memory.
    ImageHeld { epoch: u64 },
    /// To the recovery's leader: this node is ready to recover; what it knows and holds.
    Join {
        /// The sender's MCAPI node.
        id: u32,
        /// The node's barrier epoch.
        epoch: u64,
        /// The owner table (DSM id → MCAPI node) the node works with.
        owners: Vec<u32>,
        /// The MCAPI nodes it saw lost.
        lost: Vec<u32>,
        /// The epochs of its own complete images.
        own: Vec<u64>,
        /// The epochs of the complete images it holds for the node before it.
        held: Vec<u64>,
    },
    /// From the leader: the recovery's plan (the message's generation is the new one).
    Plan {
        /// The checkpoint every node rolls back to.
        checkpoint: u64,
        /// The barrier epoch the job goes on from.
        epoch: u64,
        /// The new owner table.
        owners: Vec<u32>,
        /// The DSM ids whose owner gets its image from the buddy.
        handover: Vec<u32>,
    },
    /// From the leader: the job cannot recover (the text says why).
    RecoverFail { text: String },
    /// From the leader: a recovery is under way; join it.
    RecoverCall { lost: Vec<u32> },
    /// From a node's receive thread to its own application: look at the recovery state.
    Wake,
    /// To an idle standby: the job is over.
    Dismiss,
}

const T_PAGE_GET: u8 = 1;
const T_PAGE: u8 = 2;
const T_DIFFS: u8 = 3;
const T_DIFF_ACK: u8 = 4;
const T_ARRIVE: u8 = 5;
const T_DEPART: u8 = 6;
const T_ACQUIRE: u8 = 7;
const T_GRANT: u8 = 8;
const T_RELEASE: u8 = 9;
const T_REFUSE: u8 = 10;
const T_STOP: u8 = 11;
const T_IMAGE_CHUNK: u8 = 12;
const T_IMAGE_END: u8 = 13;
const T_IMAGE_HELD: u8 = 14;
const T_JOIN: u8 = 15;
const T_PLAN: u8 = 16;
const T_RECOVER_FAIL: u8 = 17;
const T_RECOVER_CALL: u8 = 18;
const T_WAKE: u8 = 19;
const T_DISMISS: u8 = 20;
const T_HANDOVER_CHUNK: u8 = 21;
const T_HANDOVER_END: u8 = 22;

struct Writer(Vec<u8>);

impl Writer {
    fn new(t: u8, from: u32, gen: u64) -> Writer {
        let mut v = Vec::with_capacity(64);
        v.push(t);
        v.extend_from_slice(&from.to_le_bytes());
        v.extend_from_slice(&gen.to_le_bytes());
        Writer(v)
    }
    fn epochs(&mut self, e: &[u64]) {
        self.u32(e.len() as u32);
        for &x in e {
            self.u64(x);
        }
    }
    fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn pages(&mut self, p: &[u32]) {
        self.u32(p.len() as u32);
        for &x in p {
            self.u32(x);
        }
    }
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err(format!(
                "truncated: {n} bytes wanted, {} left",
                self.b.len()
            ));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn pages(&mut self) -> Result<Vec<u32>, String> {
        let n = self.u32()? as usize;
        if n > self.b.len() / 4 {
            return Err(format!("{n} pages announced, {} bytes left", self.b.len()));
        }
        (0..n).map(|_| self.u32()).collect()
    }
    fn epochs(&mut self) -> Result<Vec<u64>, String> {
        let n = self.u32()? as usize;
        if n > self.b.len() / 8 {
            return Err(format!("{n} epochs announced, {} bytes left", self.b.len()));
        }
        (0..n).map(|_| self.u64()).collect()
    }
    fn end(&self) -> Result<(), String> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(format!("{} bytes too many", self.b.len()))
        }
    }
}

/// An `ImageChunk` straight from a slice of the image (no intermediate copy).
#[cfg(test)]
pub fn encode_image_chunk(
    buf: &mut Vec<u8>,
    from: u32,
    gen: u64,
    handover: bool,
    epoch: u64,
    offset: u64,
    data: &[u8],
) {
    encode_image_chunk_head(buf, from, gen, handover, epoch, offset, data.len());
    buf.extend_from_slice(data);
}

/// The bytes of an image chunk that come before its `len` data bytes: the chunk is sent as
/// this head and the data gathered from the image itself, without a copy into one buffer.
pub fn encode_image_chunk_head(
    buf: &mut Vec<u8>,
    from: u32,
    gen: u64,
    handover: bool,
    epoch: u64,
    offset: u64,
    len: usize,
) {
    buf.clear();
    let mut w = Writer(std::mem::take(buf));
    w.u8(if handover {
        T_HANDOVER_CHUNK
    } else {
        T_IMAGE_CHUNK
    });
    w.u32(from);
    w.u64(gen);
    w.u64(epoch);
    w.u64(offset);
    w.u32(len as u32);
    *buf = w.0;
}

/// An image chunk read in place; `None` for any other message or a malformed one (which
/// `Msg::decode` then reports).
pub struct ChunkRef<'a> {
    pub from: u32,
    pub gen: u64,
    pub handover: bool,
    pub epoch: u64,
    pub offset: u64,
    pub data: &'a [u8],
}

pub fn decode_image_chunk(b: &[u8]) -> Option<ChunkRef<'_>> {
    let mut r = Reader { b };
    let handover = match r.u8().ok()? {
        T_IMAGE_CHUNK => false,
        T_HANDOVER_CHUNK => true,
        _ => return None,
    };
    let from = r.u32().ok()?;
    let gen = r.u64().ok()?;
    let epoch = r.u64().ok()?;
    let offset = r.u64().ok()?;
    let n = r.u32().ok()? as usize;
    let data = r.take(n).ok()?;
    r.end().ok()?;
    Some(ChunkRef {
        from,
        gen,
        handover,
        epoch,
        offset,
        data,
    })
}

impl Msg {
    pub fn encode(&self, from: u32, gen: u64) -> Vec<u8> {
        let mut w;
        match self {
            Msg::PageGet { page, reply } => {
                w = Writer::new(T_PAGE_GET, from, gen);
                w.u32(*page);
                w.u8(match reply {
                    ReplyTo::Compute => 0,
                    ReplyTo::Fault => 1,
                });
            }
            Msg::Page { page, data } => {
                w = Writer::new(T_PAGE, from, gen);
                w.u32(*page);
                w.bytes(data);
            }
            Msg::Diffs { body } => {
                w = Writer::new(T_DIFFS, from, gen);
                w.bytes(body);
            }
            Msg::DiffAck => w = Writer::new(T_DIFF_ACK, from, gen),
            Msg::Arrive {
                kind,
                epoch,
                check,
                notices,
            } => {
                w = Writer::new(T_ARRIVE, from, gen);
                w.u8(match kind {
                    BarrierKind::Init => 0,
                    BarrierKind::Barrier => 1,
                    BarrierKind::Finalize => 2,
                    BarrierKind::Checkpoint => 3,
                    BarrierKind::Rollback => 4,
                });
                w.u64(*epoch);
                w.u64(*check);
                w.pages(notices);
            }
            Msg::Depart { epoch, notices } => {
                w = Writer::new(T_DEPART, from, gen);
                w.u64(*epoch);
                w.u32(notices.len() as u32);
                for (node, pages) in notices {
                    w.u32(*node);
                    w.pages(pages);
                }
            }
            Msg::Acquire { lock, epoch } => {
                w = Writer::new(T_ACQUIRE, from, gen);
                w.u32(*lock);
                w.u64(*epoch);
            }
            Msg::Grant { lock, notices } => {
                w = Writer::new(T_GRANT, from, gen);
                w.u32(*lock);
                w.pages(notices);
            }
            Msg::Release {
                lock,
                epoch,
                notices,
            } => {
                w = Writer::new(T_RELEASE, from, gen);
                w.u32(*lock);
                w.u64(*epoch);
                w.pages(notices);
            }
            Msg::Refuse { text } => {
                w = Writer::new(T_REFUSE, from, gen);
                w.bytes(text.as_bytes());
            }
            Msg::Stop => w = Writer::new(T_STOP, from, gen),
            Msg::ImageChunk {
                handover,
                epoch,
                offset,
                data,
            } => {
                let t = if *handover {
                    T_HANDOVER_CHUNK
                } else {
                    T_IMAGE_CHUNK
                };
                w = Writer::new(t, from, gen);
                w.u64(*epoch);
                w.u64(*offset);
                w.bytes(data);
            }
            Msg::ImageEnd {
                handover,
                epoch,
                len,
                crc,
            } => {
                let t = if *handover {
                    T_HANDOVER_END
                } else {
                    T_IMAGE_END
                };
                w = Writer::new(t, from, gen);
                w.u64(*epoch);
                w.u64(*len);
                w.u32(*crc);
            }
            Msg::ImageHeld { epoch } => {
                w = Writer::new(T_IMAGE_HELD, from, gen);
                w.u64(*epoch);
            }
            Msg::Join {
                id,
                epoch,
                owners,
                lost,
                own,
                held,
            } => {
                w = Writer::new(T_JOIN, from, gen);
                w.u32(*id);
                w.u64(*epoch);
                w.pages(owners);
                w.pages(lost);
                w.epochs(own);
                w.epochs(held);
            }
            Msg::Plan {
                checkpoint,
                epoch,
                owners,
                handover,
            } => {
                w = Writer::new(T_PLAN, from, gen);
                w.u64(*checkpoint);
                w.u64(*epoch);
                w.pages(owners);
                w.pages(handover);
            }
            Msg::RecoverFail { text } => {
                w = Writer::new(T_RECOVER_FAIL, from, gen);
                w.bytes(text.as_bytes());
            }
            Msg::RecoverCall { lost } => {
                w = Writer::new(T_RECOVER_CALL, from, gen);
                w.pages(lost);
            }
            Msg::Wake => w = Writer::new(T_WAKE, from, gen),
            Msg::Dismiss => w = Writer::new(T_DISMISS, from, gen),
        }
        w.0
    }

    /// The sender, its generation and the message, or what is wrong with the bytes.
    pub fn decode(b: &[u8]) -> Result<(u32, u64, Msg), String> {
        let mut r = Reader { b };
        let t = r.u8()?;
        let from = r.u32()?;
        let gen = r.u64()?;
        let m = match t {
            T_PAGE_GET => Msg::PageGet {
                page: r.u32()?,
                reply: match r.u8()? {
                    0 => ReplyTo::Compute,
                    1 => ReplyTo::Fault,
                    x => return Err(format!("reply endpoint {x} is unknown")),
                },
            },
            T_PAGE => Msg::Page {
                page: r.u32()?,
                data: r.bytes()?,
            },
            T_DIFFS => Msg::Diffs { body: r.bytes()? },
            T_DIFF_ACK => Msg::DiffAck,
            T_ARRIVE => Msg::Arrive {
                kind: match r.u8()? {
                    0 => BarrierKind::Init,
                    1 => BarrierKind::Barrier,
                    2 => BarrierKind::Finalize,
                    3 => BarrierKind::Checkpoint,
                    4 => BarrierKind::Rollback,
                    x => return Err(format!("barrier kind {x} is unknown")),
                },
                epoch: r.u64()?,
                check: r.u64()?,
                notices: r.pages()?,
            },
            T_DEPART => {
                let epoch = r.u64()?;
                let n = r.u32()? as usize;
                if n > r.b.len() / 8 {
                    return Err(format!("{n} nodes announced, {} bytes left", r.b.len()));
                }
                let mut notices = Vec::with_capacity(n);
                for _ in 0..n {
                    notices.push((r.u32()?, r.pages()?));
                }
                Msg::Depart { epoch, notices }
            }
            T_ACQUIRE => Msg::Acquire {
                lock: r.u32()?,
                epoch: r.u64()?,
            },
            T_GRANT => Msg::Grant {
                lock: r.u32()?,
                notices: r.pages()?,
            },
            T_RELEASE => Msg::Release {
                lock: r.u32()?,
                epoch: r.u64()?,
                notices: r.pages()?,
            },
            T_REFUSE => Msg::Refuse {
                text: String::from_utf8_lossy(&r.bytes()?).into_owned(),
            },
            T_STOP => Msg::Stop,
            T_IMAGE_CHUNK | T_HANDOVER_CHUNK => Msg::ImageChunk {
                handover: t == T_HANDOVER_CHUNK,
                epoch: r.u64()?,
                offset: r.u64()?,
                data: r.bytes()?,
            },
            T_IMAGE_END | T_HANDOVER_END => Msg::ImageEnd {
                handover: t == T_HANDOVER_END,
                epoch: r.u64()?,
                len: r.u64()?,
                crc: r.u32()?,
            },
            T_IMAGE_HELD => Msg::ImageHeld { epoch: r.u64()? },
            T_JOIN => Msg::Join {
                id: r.u32()?,
                epoch: r.u64()?,
                owners: r.pages()?,
                lost: r.pages()?,
                own: r.epochs()?,
                held: r.epochs()?,
            },
            T_PLAN => Msg::Plan {
                checkpoint: r.u64()?,
                epoch: r.u64()?,
                owners: r.pages()?,
                handover: r.pages()?,
            },
            T_RECOVER_FAIL => Msg::RecoverFail {
                text: String::from_utf8_lossy(&r.bytes()?).into_owned(),
            },
            T_RECOVER_CALL => Msg::RecoverCall { lost: r.pages()? },
            T_WAKE => Msg::Wake,
            T_DISMISS => Msg::Dismiss,
            x => return Err(format!("message type {x} is unknown")),
        };
        r.end()?;
        Ok((from, gen, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips_and_every_truncation_is_refused() {
        let all = vec![
            Msg::PageGet {
                page: 7,
                reply: ReplyTo::Fault,
            },
            Msg::Page {
                page: 3,
                data: vec![1, 2, 3],
            },
            Msg::Diffs { body: vec![9; 10] },
            Msg::DiffAck,
            Msg::Arrive {
                kind: BarrierKind::Finalize,
                epoch: 5,
                check: 77,
                notices: vec![1, 2],
            },
            Msg::Depart {
                epoch: 5,
                notices: vec![(0, vec![1]), (1, vec![])],
            },
            Msg::Acquire { lock: 4, epoch: 2 },
            Msg::Grant {
                lock: 4,
                notices: vec![8],
            },
            Msg::Release {
                lock: 4,
                epoch: 2,
                notices: vec![8, 9],
            },
            Msg::Refuse { text: "no".into() },
            Msg::Stop,
            Msg::ImageChunk {
                handover: false,
                epoch: 1,
                offset: 4096,
                data: vec![7; 5],
            },
            Msg::ImageChunk {
                handover: true,
                epoch: 1,
                offset: 0,
                data: vec![7; 5],
            },
            Msg::ImageEnd {
                handover: false,
                epoch: 1,
                len: 9,
                crc: 0xdead_beef,
            },
            Msg::ImageEnd {
                handover: true,
                epoch: 1,
                len: 9,
                crc: 0xdead_beef,
            },
            Msg::ImageHeld { epoch: 1 },
            Msg::Join {
                id: 4,
                epoch: 9,
                owners: vec![0, 4, 2],
                lost: vec![1],
                own: vec![3, 7],
                held: vec![7],
            },
            Msg::Plan {
                checkpoint: 7,
                epoch: 12,
                owners: vec![0, 4, 2],
                handover: vec![1],
            },
            Msg::RecoverFail { text: "no".into() },
            Msg::RecoverCall { lost: vec![1, 2] },
            Msg::Wake,
            Msg::Dismiss,
        ];
        for m in all {
            let b = m.encode(3, 5);
            assert_eq!(Msg::decode(&b).unwrap(), (3, 5, m.clone()));
            for cut in 0..b.len() {
                assert!(Msg::decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut long = b.clone();
            long.push(0);
            assert!(Msg::decode(&long).is_err());
        }
        assert!(Msg::decode(&[200, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        let mut b = vec![1, 2, 3];
        encode_image_chunk(&mut b, 2, 6, true, 9, 4096, b"abc");
        let c = decode_image_chunk(&b).unwrap();
        assert_eq!(
            (c.from, c.gen, c.handover, c.epoch, c.offset, c.data),
            (2, 6, true, 9, 4096, &b"abc"[..])
        );
        assert_eq!(
            Msg::decode(&b).unwrap(),
            (
                2,
                6,
                Msg::ImageChunk {
                    handover: true,
                    epoch: 9,
                    offset: 4096,
                    data: b"abc".to_vec()
                }
            )
        );
        for cut in 0..b.len() {
            assert!(decode_image_chunk(&b[..cut]).is_none());
        }
    }
}
