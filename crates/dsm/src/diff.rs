//! Twins and diffs: what a node changed in a page, byte-exact, so that several writers of
//! disjoint bytes of one page merge correctly at its home.
//!
//! A body is a sequence of `page u32, runs u16, (offset u16, length u16, bytes)*`, little-endian.

/// Appends to `out` the diff of `page` (`now` against its `twin`); returns the bytes it added.
pub fn encode(page: u32, twin: &[u8], now: &[u8], out: &mut Vec<u8>) -> usize {
    debug_assert_eq!(twin.len(), now.len());
    let start = out.len();
    out.extend_from_slice(&page.to_le_bytes());
    let count_at = out.len();
    out.extend_from_slice(&0u16.to_le_bytes());
    let mut runs: u16 = 0;
    let n = now.len();
    let mut i = 0;
    while i < n {
        // Skip equal 8-byte words quickly, then equal bytes.
        while i + 8 <= n && twin[i..i + 8] == now[i..i + 8] {
            i += 8;
        }
        while i < n && twin[i] == now[i] {
            i += 1;
        }
        if i == n {
            break;
        }
        let s = i;
        while i < n && twin[i] != now[i] {
            i += 1;
        }
        out.extend_from_slice(&(s as u16).to_le_bytes());
        out.extend_from_slice(&((i - s) as u16).to_le_bytes());
        out.extend_from_slice(&now[s..i]);
        runs += 1;
    }
    if runs == 0 {
        out.truncate(start);
        return 0;
    }
    out[count_at..count_at + 2].copy_from_slice(&runs.to_le_bytes());
    out.len() - start
}

/// Applies every diff of `body` through `write(page, offset, bytes)`; `is_home(page)` says
/// whether a page is one of this node's home pages. The whole body is checked before anything
/// is written.
pub fn apply(
    body: &[u8],
    page_size: usize,
    is_home: impl Fn(u32) -> bool,
    mut write: impl FnMut(u32, usize, &[u8]),
) -> Result<usize, String> {
    let runs = parse(body, page_size)?;
    if let Some(r) = runs.iter().find(|r| !is_home(r.0)) {
        return Err(format!("page {} is not homed here", r.0));
    }
    for &(page, off, bytes) in &runs {
        write(page, off, bytes);
    }
    Ok(runs.len())
}

/// One run of a diff: page, offset, new bytes.
type Run<'a> = (u32, usize, &'a [u8]);

fn parse(body: &[u8], page_size: usize) -> Result<Vec<Run<'_>>, String> {
    let mut out = Vec::new();
    let mut b = body;
    while !b.is_empty() {
        let page = u32::from_le_bytes(take(&mut b, 4)?.try_into().unwrap());
        let runs = u16::from_le_bytes(take(&mut b, 2)?.try_into().unwrap());
        for _ in 0..runs {
            let off = u16::from_le_bytes(take(&mut b, 2)?.try_into().unwrap()) as usize;
            let len = u16::from_le_bytes(take(&mut b, 2)?.try_into().unwrap()) as usize;
            if off + len > page_size || len == 0 {
                return Err(format!(
                    "diff run {off}+{len} is outside a {page_size}-byte page"
                ));
            }
            out.push((page, off, take(&mut b, len)?));
        }
    }
    Ok(out)
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if b.len() < n {
        return Err("diff body truncated".into());
    }
    let (h, t) = b.split_at(n);
    *b = t;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_writers_of_disjoint_bytes_merge_at_the_home() {
        let ps = 4096;
        let base: Vec<u8> = (0..ps).map(|i| (i * 7) as u8).collect();
        // Writer A changes even bytes of the first half, B odd bytes and the last byte.
        let mut a = base.clone();
        let mut b = base.clone();
        for i in (0..ps / 2).step_by(2) {
            a[i] ^= 0xff;
        }
        for i in (1..ps).step_by(2) {
            b[i] = b[i].wrapping_add(1);
        }
        let mut body = Vec::new();
        assert!(encode(9, &base, &a, &mut body) > 0);
        assert!(encode(9, &base, &b, &mut body) > 0);
        assert_eq!(encode(10, &base, &base, &mut body), 0, "no change, no diff");
        let mut home = base.clone();
        apply(
            &body,
            ps,
            |p| p == 9,
            |_, o, b| home[o..o + b.len()].copy_from_slice(b),
        )
        .unwrap();
        let mut want = base.clone();
        for i in 0..ps {
            if i % 2 == 0 && i < ps / 2 {
                want[i] = a[i];
            }
            if i % 2 == 1 {
                want[i] = b[i];
            }
        }
        assert_eq!(home, want);
    }

    #[test]
    fn a_bad_body_is_refused_before_anything_is_written() {
        let ps = 4096;
        let base = vec![0u8; ps];
        let mut now = base.clone();
        now[4095] = 1;
        let mut body = Vec::new();
        encode(1, &base, &now, &mut body);
        let mut home = base.clone();
        for cut in 1..body.len() {
            let r = apply(
                &body[..cut],
                ps,
                |_| true,
                |_, o, b| home[o..o + b.len()].copy_from_slice(b),
            );
            assert!(r.is_err(), "cut at {cut}");
        }
        assert_eq!(home, base);
        assert!(apply(&body, 2048, |_| true, |_, _, _| panic!("written")).is_err());
        assert!(apply(&body, ps, |_| false, |_, _, _| panic!("written")).is_err());
    }
}
