//! Payload buffers that are reused instead of freshly allocated for every large message or
//! packet. A buffer of hundreds of KiB comes from the allocator as a new mapping whose every
//! page faults (and is zeroed by the kernel) on first touch, and goes back with `munmap`: for
//! a stream of large packets that cost more than copying the bytes. The pool keeps a bounded
//! number of such buffers (the ones receivers handed back) and gives them out again.

/// Smaller buffers come from the allocator, which reuses them well on its own.
pub const POOLED_MIN: usize = 16 << 10;
/// At most this many bytes of buffers wait in the pool (per node).
const POOL_BYTES: usize = 16 << 20;
/// At most this many buffers wait in the pool.
const POOL_COUNT: usize = 64;

#[derive(Default)]
pub struct BufPool {
    free: Vec<Vec<u8>>,
    bytes: usize,
}

impl BufPool {
    /// An empty buffer with room for at least `len` bytes (a reused one when the pool has one).
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        if len >= POOLED_MIN {
            // The smallest buffer that fits: large ones stay for large payloads.
            let best = self
                .free
                .iter()
                .enumerate()
                .filter(|(_, v)| v.capacity() >= len)
                .min_by_key(|(_, v)| v.capacity())
                .map(|(i, _)| i);
            if let Some(i) = best {
                let v = self.free.swap_remove(i);
                self.bytes -= v.capacity();
                return v;
            }
        }
        Vec::with_capacity(len)
    }

    /// Takes `v` back for reuse (dropped if small or if the pool is full).
    pub fn give(&mut self, mut v: Vec<u8>) {
        let cap = v.capacity();
        if cap < POOLED_MIN || self.free.len() >= POOL_COUNT {
            return;
        }
        if self.bytes + cap > POOL_BYTES {
            // Make room by dropping the smallest buffers, if `v` is larger than they are.
            self.free
                .sort_unstable_by_key(|b| std::cmp::Reverse(b.capacity()));
            while self.bytes + cap > POOL_BYTES {
                match self.free.last() {
                    Some(b) if b.capacity() < cap => {
                        self.bytes -= b.capacity();
                        self.free.pop();
                    }
                    _ => return,
                }
            }
        }
        v.clear();
        self.bytes += cap;
        self.free.push(v);
    }

    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        (self.free.len(), self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_are_reused_and_the_pool_is_bounded() {
        let mut p = BufPool::default();
        let mut v = p.take(256 << 10);
        v.extend_from_slice(&[7u8; 1000]);
        let ptr = v.as_ptr();
        p.give(v);
        assert_eq!(p.held(), (1, 256 << 10));
        let w = p.take(100 << 10);
        assert_eq!(w.as_ptr(), ptr, "the pooled buffer comes back");
        assert!(w.is_empty(), "emptied");
        assert_eq!(p.held(), (0, 0));
        // Small buffers are not kept.
        p.give(Vec::with_capacity(100));
        assert_eq!(p.held().0, 0);
        // Bounded in bytes: 17 buffers of 1 MiB leave at most 16 MiB.
        for _ in 0..17 {
            p.give(Vec::with_capacity(1 << 20));
        }
        assert!(p.held().1 <= POOL_BYTES);
        // A buffer too small for a request is not handed out.
        let mut q = BufPool::default();
        q.give(Vec::with_capacity(32 << 10));
        assert!(q.take(64 << 10).capacity() >= 64 << 10);
        assert_eq!(q.held().0, 1);
    }
}
