//! kioku-cache's request parser and executor: a client's byte stream is parsed request by
//! request as the server does (a refused value is discarded, a line over the limit ends the
//! stream) and each request runs against a small cache. Nothing may panic, every step must
//! consume bytes and stay inside the buffer, and every reply ends with `\r\n`.

use std::sync::Arc;

use kioku_cache::protocol::{self, Limits};
use kioku_cache::{Cache, Mapping, Settings, Slabs, Store};

/// Input: the bytes a client sends on one connection.
pub fn cache_protocol(data: &[u8]) {
    const PAGE: usize = 1 << 20;
    let mapping = Mapping::anonymous(2 * PAGE).expect("2 MiB of item memory");
    let store = Store::new(Slabs::new(mapping.memory(), PAGE, 1.25), true);
    let settings = Settings {
        memory_limit: 2 * PAGE,
        item_size_max: 64 * 1024,
        max_connections: 1,
        threads: 1,
        port: 0,
        interface: "127.0.0.1".into(),
        growth_factor: 1.25,
        evictions: true,
        cas_enabled: true,
        flush_enabled: true,
    };
    let cache = Arc::new(Cache::new(store, settings));
    let limits = Limits {
        max_value: cache.max_value(),
    };
    let mut at = 0;
    let mut out = Vec::new();
    while at < data.len() {
        let rest = &data[at..];
        out.clear();
        match protocol::parse(rest, &limits) {
            Ok(None) => break,
            Ok(Some((cmd, n))) => {
                assert!(
                    n > 0 && n <= rest.len(),
                    "a request used {n} of {} bytes",
                    rest.len()
                );
                cache.execute(&cmd, &mut out);
                at += n;
            }
            Err(e) => {
                assert!(
                    e.consumed > 0 && e.consumed <= rest.len(),
                    "error used {} of {}",
                    e.consumed,
                    rest.len()
                );
                if let Some((k, len)) = e.stale_key {
                    assert!(k + len <= e.consumed, "stale key outside the line");
                    cache.drop_key(&rest[k..k + len]);
                }
                out.extend_from_slice(e.kind.reply());
                if e.close {
                    break;
                }
                at += e.consumed + e.swallow.min(rest.len() - e.consumed);
            }
        }
        assert!(
            out.is_empty() || out.ends_with(b"\r\n"),
            "a reply without its \\r\\n"
        );
    }
    drop(cache);
    drop(mapping);
}
