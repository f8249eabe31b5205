//! Page-granular views of engine regions (the memory a rank's data, journals and parity live
//! in), and the sparse page lists the encoding pipeline passes along.

use crate::group::Engine;

/// A region's memory: valid while the engine keeps the region mapped and the region is not
/// resized (callers take a new view after `resize_region`).
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    ptr: *mut u8,
    len: usize,
    page: usize,
}

impl Mem {
    pub fn of(engine: &Engine, name: &str, page: usize) -> Option<Mem> {
        let r = engine.region(name)?;
        Some(Mem {
            ptr: r.as_ptr(),
            len: r.len,
            page,
        })
    }

    pub fn pages(&self) -> u64 {
        (self.len / self.page) as u64
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the engine maps `len` bytes at `ptr` for as long as this view is used (see
        // the type's contract); no `&mut` to them is alive while this slice is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    #[allow(clippy::mut_from_ref)]
    pub fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as `bytes`; the group library is the only writer of its own regions during
        // a collective call (the program is inside it), and uses one slice at a time.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn page(&self, i: u64) -> Option<&[u8]> {
        let at = i as usize * self.page;
        self.bytes().get(at..at + self.page)
    }

    #[allow(clippy::mut_from_ref)]
    pub fn page_mut(&self, i: u64) -> Option<&mut [u8]> {
        let at = i as usize * self.page;
        self.bytes_mut().get_mut(at..at + self.page)
    }

    /// Bit `i` of the region read as a bitmap.
    pub fn bit(&self, i: u64) -> bool {
        self.bytes()
            .get(i as usize / 8)
            .is_some_and(|b| b & (1 << (i % 8)) != 0)
    }

    pub fn set_bit(&self, i: u64) {
        if let Some(b) = self.bytes_mut().get_mut(i as usize / 8) {
            *b |= 1 << (i % 8);
        }
    }

    /// Indexes of the set bits, ascending.
    pub fn set_bits(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for (w, chunk) in self.bytes().chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            let mut v = u64::from_le_bytes(word);
            while v != 0 {
                out.push(w as u64 * 64 + v.trailing_zeros() as u64);
                v &= v - 1;
            }
        }
        out
    }

    /// Clears every bit, writing only the words that have one set (so untouched pages stay
    /// clean for the page tracker).
    pub fn clear_bits(&self) {
        for chunk in self.bytes_mut().chunks_mut(8) {
            if chunk.iter().any(|&b| b != 0) {
                chunk.fill(0);
            }
        }
    }
}

/// A sparse list of stripe pages, each `width` bytes (m parity pages in a partial sum, one
/// page for a holder), as sent between ranks: `count u32, count × q u32, count × width bytes`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sparse {
    pub qs: Vec<u32>,
    pub data: Vec<u8>,
    pub width: usize,
}

impl Sparse {
    pub fn new(width: usize) -> Sparse {
        Sparse {
            qs: vec![],
            data: vec![],
            width,
        }
    }

    pub fn len(&self) -> usize {
        self.qs.len()
    }

    /// Empties the list, keeping its buffers.
    pub fn clear(&mut self) {
        self.qs.clear();
        self.data.clear();
    }

    /// Reads a message in place: its page numbers into `qs`, its entries as the returned
    /// bytes (`qs.len() × width`).
    pub fn parse<'a>(b: &'a [u8], width: usize, qs: &mut Vec<u32>) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        let qs_end = 4 + 4 * n;
        qs.clear();
        qs.extend(
            b.get(4..qs_end)?
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))),
        );
        let data = b.get(qs_end..)?;
        (data.len() == n * width).then_some(data)
    }

    /// Writes the message of entries' bytes `part` (a `width`-wide slice at `part × width`
    /// of each entry) into `out`: what holder `part` of a partial sum receives.
    pub fn encode_part_into(&self, part: usize, width: usize, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&(self.qs.len() as u32).to_le_bytes());
        for q in &self.qs {
            out.extend_from_slice(&q.to_le_bytes());
        }
        for e in 0..self.len() {
            out.extend_from_slice(&self.entry(e)[part * width..(part + 1) * width]);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.qs.is_empty()
    }

    pub fn entry(&self, i: usize) -> &[u8] {
        &self.data[i * self.width..(i + 1) * self.width]
    }

    pub fn push(&mut self, q: u32, bytes: &[u8]) {
        debug_assert!(self.qs.last().is_none_or(|&l| l < q));
        self.qs.push(q);
        self.data.extend_from_slice(bytes);
    }

    /// Appends a zeroed entry for `q` and returns it.
    pub fn push_zero(&mut self, q: u32) -> &mut [u8] {
        self.qs.push(q);
        let at = self.data.len();
        self.data.resize(at + self.width, 0);
        &mut self.data[at..]
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&(self.qs.len() as u32).to_le_bytes());
        for q in &self.qs {
            out.extend_from_slice(&q.to_le_bytes());
        }
        out.extend_from_slice(&self.data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_round_trips() {
        let mut s = Sparse::new(3);
        s.push(1, &[1, 2, 3]);
        s.push_zero(7)[2] = 9;
        let mut b = Vec::new();
        s.encode_into(&mut b);
        let mut qs = vec![];
        assert_eq!(Sparse::parse(&b[..b.len() - 1], 3, &mut qs), None);
        assert_eq!(Sparse::parse(&b, 3, &mut qs), Some(&[1, 2, 3, 0, 0, 9][..]));
        assert_eq!(qs, vec![1, 7]);
        s.encode_part_into(1, 1, &mut b);
        assert_eq!(Sparse::parse(&b, 1, &mut qs), Some(&[2, 0][..]));
    }
}
