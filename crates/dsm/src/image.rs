//! Checkpoint images and NDCKPT's two contexts.
//!
//! A node's image is its home pages and its private state at a checkpoint. Its buddy keeps the
//! images it receives in two contexts: a new image is written into the context that does not
//! hold the newest complete one, so a failure during a checkpoint never loses the previous
//! checkpoint. The node keeps its own images the same way, to roll back without a transfer.
//!
//! Layout: `"KDSMIMG1"`, node u32, epoch u64, pages u32, page size u32, private length u64,
//! allocated pages u32, the home of every allocated page (u32 each; what a standby needs to
//! know the job's allocations), the numbers of this node's home pages (u32 each), those pages,
//! the private state; little-endian.

const MAGIC: &[u8; 8] = b"KDSMIMG1";
const HEADER: usize = 8 + 4 + 8 + 4 + 4 + 8 + 4;

/// Builds an image; `page(p, dst)` copies home page `p` into `dst`.
#[cfg(test)]
pub fn encode(
    node: u32,
    epoch: u64,
    homes: &[u32],
    pages: &[u32],
    page_size: usize,
    page: impl FnMut(u32, &mut [u8]),
    private: &[u8],
) -> Vec<u8> {
    let mut v = Vec::new();
    encode_into(&mut v, node, epoch, homes, pages, page_size, page, private);
    v
}

/// Builds an image into `v`, whose memory is reused (so that a checkpoint does not fault in a
/// fresh buffer each time) and whose old bytes are all overwritten, none zeroed first: the
/// pages are copied once, straight into their place.
#[allow(clippy::too_many_arguments)]
pub fn encode_into(
    v: &mut Vec<u8>,
    node: u32,
    epoch: u64,
    homes: &[u32],
    pages: &[u32],
    page_size: usize,
    mut page: impl FnMut(u32, &mut [u8]),
    private: &[u8],
) {
    let data_at = HEADER + 4 * homes.len() + 4 * pages.len();
    let private_at = data_at + pages.len() * page_size;
    let total = private_at + private.len();
    // Only memory the buffer never had is zeroed (then overwritten like the rest).
    v.resize(total, 0);
    let mut at = 0;
    let mut put = |b: &[u8]| {
        v[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    };
    put(MAGIC);
    put(&node.to_le_bytes());
    put(&epoch.to_le_bytes());
    put(&(pages.len() as u32).to_le_bytes());
    put(&(page_size as u32).to_le_bytes());
    put(&(private.len() as u64).to_le_bytes());
    put(&(homes.len() as u32).to_le_bytes());
    for h in homes {
        put(&h.to_le_bytes());
    }
    for p in pages {
        put(&p.to_le_bytes());
    }
    debug_assert_eq!(at, data_at);
    for (i, &p) in pages.iter().enumerate() {
        let o = data_at + i * page_size;
        page(p, &mut v[o..o + page_size]);
    }
    v[private_at..].copy_from_slice(private);
}

/// A decoded image (borrowing its bytes): what a rollback or a takeover restores.
#[derive(Debug)]
pub struct Image<'a> {
    pub node: u32,
    pub epoch: u64,
    pub homes: Vec<u32>,
    pub pages: Vec<u32>,
    pub page_size: usize,
    data: &'a [u8],
    pub private: &'a [u8],
}

impl<'a> Image<'a> {
    pub fn decode(b: &'a [u8]) -> Result<Image<'a>, String> {
        if b.len() < HEADER || &b[..8] != MAGIC {
            return Err("not a DSM checkpoint image".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let node = u32_at(8);
        let epoch = u64_at(12);
        let n = u32_at(20) as usize;
        let page_size = u32_at(24) as usize;
        let private_len = u64_at(28) as usize;
        let allocated = u32_at(36) as usize;
        let want = (n as u128) * (4 + page_size as u128)
            + 4 * allocated as u128
            + private_len as u128
            + HEADER as u128;
        if want != b.len() as u128 {
            return Err(format!(
                "the image has {} bytes, its header says {want}",
                b.len()
            ));
        }
        let homes = (0..allocated).map(|i| u32_at(HEADER + 4 * i)).collect();
        let pages_at = HEADER + 4 * allocated;
        let pages: Vec<u32> = (0..n).map(|i| u32_at(pages_at + 4 * i)).collect();
        if pages.iter().any(|&p| p as usize >= allocated) {
            return Err("the image holds a page that was never allocated".into());
        }
        let data_at = pages_at + 4 * n;
        let private_at = data_at + n * page_size;
        Ok(Image {
            node,
            epoch,
            homes,
            pages,
            page_size,
            data: &b[data_at..private_at],
            private: &b[private_at..],
        })
    }

    /// The bytes of the i-th page of the image.
    pub fn page(&self, i: usize) -> &'a [u8] {
        &self.data[i * self.page_size..(i + 1) * self.page_size]
    }
}

#[derive(Default)]
struct Context {
    epoch: u64,
    complete: bool,
    crc: u32,
    bytes: Vec<u8>,
}

/// One node's images in two contexts.
#[derive(Default)]
pub struct Contexts {
    ctx: [Context; 2],
}

impl Contexts {
    fn newest_complete(&self) -> Option<usize> {
        (0..2)
            .filter(|&i| self.ctx[i].complete)
            .max_by_key(|&i| self.ctx[i].epoch)
    }

    /// Starts receiving the image of `epoch` into the context that does not hold the newest
    /// complete image (it is overwritten only once a newer one is complete).
    pub fn begin(&mut self, epoch: u64) -> Result<(), String> {
        if let Some(i) = self.newest_complete() {
            if self.ctx[i].epoch >= epoch {
                return Err(format!(
                    "an image of epoch {epoch} after one of epoch {}",
                    self.ctx[i].epoch
                ));
            }
        }
        let target = match self.newest_complete() {
            Some(i) => 1 - i,
            None => 0,
        };
        let c = &mut self.ctx[target];
        c.epoch = epoch;
        c.complete = false;
        c.crc = 0;
        c.bytes.clear();
        Ok(())
    }

    fn receiving(&mut self, epoch: u64) -> Result<&mut Context, String> {
        self.ctx
            .iter_mut()
            .find(|c| !c.complete && c.epoch == epoch)
            .ok_or_else(|| format!("no image of epoch {epoch} is being received"))
    }

    /// Appends bytes at `offset` (images arrive in order).
    pub fn write(
        &mut self,
        epoch: u64,
        offset: u64,
        data: &[u8],
        max: usize,
    ) -> Result<(), String> {
        let c = self.receiving(epoch)?;
        if offset != c.bytes.len() as u64 {
            return Err(format!(
                "image bytes at {offset}, expected at {}",
                c.bytes.len()
            ));
        }
        if c.bytes.len() + data.len() > max {
            return Err(format!(
                "an image larger than the {max} bytes a node can have"
            ));
        }
        c.bytes.extend_from_slice(data);
        Ok(())
    }

    /// Completes the image of `epoch` if it has `len` bytes with CRC-32C `crc`.
    pub fn end(&mut self, epoch: u64, len: u64, crc: u32) -> Result<(), String> {
        let c = self.receiving(epoch)?;
        let got = crc32c::crc32c(&c.bytes);
        if c.bytes.len() as u64 != len || got != crc {
            return Err(format!(
                "the image of epoch {epoch} arrived damaged ({} bytes, CRC {got:08x}; sent {len} bytes, CRC {crc:08x})",
                c.bytes.len()
            ));
        }
        Image::decode(&c.bytes)?;
        c.crc = crc;
        c.complete = true;
        Ok(())
    }

    /// The memory of the context the next image goes into (not the newest complete one's),
    /// to build the image in (`encode_into` overwrites all of it) and `put` back.
    pub fn take_spare(&mut self) -> Vec<u8> {
        let target = match self.newest_complete() {
            Some(i) => 1 - i,
            None => 0,
        };
        let c = &mut self.ctx[target];
        c.complete = false;
        std::mem::take(&mut c.bytes)
    }

    /// Stores a whole image at once (a node's own copy), its CRC-32C already computed.
    pub fn put_with_crc(&mut self, epoch: u64, bytes: Vec<u8>, crc: u32) -> Result<(), String> {
        self.begin(epoch)?;
        let c = self.receiving(epoch)?;
        c.bytes = bytes;
        c.crc = crc;
        c.complete = true;
        Ok(())
    }

    /// The complete images held: (epoch, length, CRC-32C), oldest first.
    pub fn held(&self) -> Vec<(u64, usize, u32)> {
        let mut v: Vec<_> = self
            .ctx
            .iter()
            .filter(|c| c.complete)
            .map(|c| (c.epoch, c.bytes.len(), c.crc))
            .collect();
        v.sort_unstable();
        v
    }

    /// Forgets the images newer than `epoch` (of a checkpoint that did not complete on every
    /// node, after the job rolled back past it).
    pub fn discard_after(&mut self, epoch: u64) {
        for c in &mut self.ctx {
            if c.epoch > epoch {
                c.complete = false;
                c.epoch = 0;
                c.bytes = Vec::new();
            }
        }
    }

    /// The complete image of `epoch`, if held.
    pub fn get(&self, epoch: u64) -> Option<&[u8]> {
        self.ctx
            .iter()
            .find(|c| c.complete && c.epoch == epoch)
            .map(|c| &c.bytes[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(epoch: u64, fill: u8) -> Vec<u8> {
        let page = [fill; 64];
        encode(
            3,
            epoch,
            &[0; 10],
            &[5, 9],
            64,
            |_, d| d.copy_from_slice(&page),
            b"private",
        )
    }

    #[test]
    fn an_image_built_in_reused_memory_is_the_same() {
        let fresh = image(7, 0xaa);
        for junk in [0usize, 10, fresh.len(), fresh.len() + 999] {
            let mut v = vec![0xeeu8; junk];
            let page = [0xaau8; 64];
            encode_into(
                &mut v,
                3,
                7,
                &[0; 10],
                &[5, 9],
                64,
                |_, d| d.copy_from_slice(&page),
                b"private",
            );
            assert_eq!(v, fresh, "built over {junk} old bytes");
        }
    }

    #[test]
    fn an_image_round_trips() {
        let b = image(7, 0xaa);
        let i = Image::decode(&b).unwrap();
        assert_eq!(
            (i.node, i.epoch, i.pages.clone(), i.private),
            (3, 7, vec![5, 9], &b"private"[..])
        );
        assert_eq!(i.page(1), &[0xaa; 64][..]);
        for cut in 0..b.len() {
            assert!(Image::decode(&b[..cut]).is_err());
        }
    }

    #[test]
    fn a_checkpoint_that_does_not_complete_keeps_the_previous_one() {
        let mut c = Contexts::default();
        let (a, b, d) = (image(1, 1), image(2, 2), image(3, 3));
        for (e, img) in [(1, &a), (2, &b)] {
            c.begin(e).unwrap();
            c.write(e, 0, &img[..10], 1 << 20).unwrap();
            c.write(e, 10, &img[10..], 1 << 20).unwrap();
            c.end(e, img.len() as u64, crc32c::crc32c(img)).unwrap();
        }
        assert_eq!(c.held().iter().map(|h| h.0).collect::<Vec<_>>(), vec![1, 2]);
        // Epoch 3 starts (overwriting epoch 1's context) and never ends: 2 is still whole.
        c.begin(3).unwrap();
        c.write(3, 0, &d[..20], 1 << 20).unwrap();
        assert_eq!(c.held().iter().map(|h| h.0).collect::<Vec<_>>(), vec![2]);
        assert_eq!(c.get(2), Some(&b[..]));
        // A damaged end is refused and completes nothing.
        assert!(c.end(3, d.len() as u64, crc32c::crc32c(&d)).is_err());
        assert!(c.write(3, 99, &d[20..], 1 << 20).is_err(), "out of order");
        // A restarted epoch 4 goes into the same context, again sparing epoch 2.
        c.begin(4).unwrap();
        c.write(4, 0, &d, 1 << 20).unwrap();
        c.end(4, d.len() as u64, crc32c::crc32c(&d)).unwrap();
        assert_eq!(c.held().iter().map(|h| h.0).collect::<Vec<_>>(), vec![2, 4]);
        assert!(c.begin(4).is_err(), "epochs only grow");
        assert!(c.write(5, 0, &d, 1 << 20).is_err(), "no begin");
        c.begin(5).unwrap();
        assert!(c.write(5, 0, &d, 8).is_err(), "larger than a node can have");
    }
}
