//! Carrying out one parsed request on the cache and writing memcached's reply.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::protocol::{Command, MetaFlags, Store as StoreReq, StoreMode};
use crate::slab::{FETCHED, HEADER, STALE, WON};
use crate::store::{absolute_exptime, Store, StoreError};

/// The version `version` and `stats` report: the memcached protocol level, then ours.
pub const VERSION: &str = concat!("1.6.18-kioku-", env!("CARGO_PKG_VERSION"));

/// Settings `stats settings` reports and the server obeys.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `-m` in bytes.
    pub memory_limit: usize,
    /// `-I` in bytes.
    pub item_size_max: usize,
    /// `-c`.
    pub max_connections: usize,
    /// `-t`.
    pub threads: usize,
    /// `-p`.
    pub port: u16,
    /// `-l`.
    pub interface: String,
    /// `-f`.
    pub growth_factor: f64,
    /// `-M` not given.
    pub evictions: bool,
    /// `-C` not given.
    pub cas_enabled: bool,
    /// `-F` not given.
    pub flush_enabled: bool,
}

/// Connection counters (kept outside the store's lock).
#[derive(Debug, Default)]
pub struct ConnCounters {
    /// Open connections.
    pub current: AtomicU64,
    /// Connections accepted since start.
    pub total: AtomicU64,
    /// Connections refused over `-c`.
    pub rejected: AtomicU64,
    /// Times the server stopped accepting because it ran out of descriptors (memcached's
    /// `listen_disabled_num`).
    pub listen_disabled: AtomicU64,
    /// Microseconds spent not accepting, for want of descriptors (memcached's
    /// `time_in_listen_disabled_us`; the current stretch counts once it ends).
    pub listen_disabled_us: AtomicU64,
    /// Not accepting now, for want of descriptors (memcached's `accepting_conns` is its negation).
    pub listen_paused: AtomicBool,
}

/// The cache: the item store behind its lock, the settings and counters.
pub struct Cache {
    store: Mutex<Store>,
    /// The settings.
    pub settings: Settings,
    /// Connection counters.
    pub conns: ConnCounters,
    /// Checkpoint counters (with `--pool`).
    pub persist: crate::persist::PersistStats,
    /// Whether the item memory is a checkpoint pool's.
    pub pooled: bool,
    /// Hot-item placement counters.
    pub placement: crate::placement::PlacementStats,
    started: i64,
    pid: u32,
}

/// What the connection does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Read the next request.
    Continue,
    /// Close the connection (after sending what was written).
    Close,
}

/// Now, in Unix seconds.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Cache {
    /// A cache over `store`.
    pub fn new(store: Store, settings: Settings) -> Self {
        Cache {
            store: Mutex::new(store),
            settings,
            conns: ConnCounters::default(),
            persist: Default::default(),
            pooled: false,
            placement: Default::default(),
            started: now(),
            pid: std::process::id(),
        }
    }

    /// The store, locked (for checkpoints and tests). A poisoned lock is taken as is: every
    /// store operation leaves the store consistent before it can panic.
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drop `key` (a `set` refused as too large: memcached leaves no stale value behind).
    pub fn drop_key(&self, key: &[u8]) {
        let mut s = self.lock();
        if let Some(id) = s.lookup(key, now()) {
            s.unlink(id);
        }
    }

    /// The largest value a store request may carry (for the parser).
    pub fn max_value(&self) -> usize {
        self.settings.item_size_max.min(self.lock().max_value(0))
    }

    /// Carry out `cmd`, appending the reply to `out`.
    pub fn execute(&self, cmd: &Command<'_>, out: &mut Vec<u8>) -> After {
        let now = now();
        match cmd {
            Command::Get {
                keys,
                with_cas,
                touch,
            } => self.get(keys, *with_cas, *touch, now, out),
            Command::Store(req) => self.store_cmd(req, now, out),
            Command::Arith {
                key,
                incr,
                delta,
                noreply,
            } => {
                let mut s = self.lock();
                let reply = arith(&mut s, key, *incr, *delta, now, None);
                let c = &mut s.counters;
                match (&reply, incr) {
                    (Arith::NotFound, true) => c.incr_misses += 1,
                    (Arith::NotFound, false) => c.decr_misses += 1,
                    (_, true) => c.incr_hits += 1,
                    (_, false) => c.decr_hits += 1,
                }
                drop(s);
                if !noreply {
                    match reply {
                        Arith::Done { value, .. } => {
                            let _ = write!(out, "{value}\r\n");
                        }
                        Arith::NotFound => out.extend_from_slice(b"NOT_FOUND\r\n"),
                        Arith::NonNumeric => out.extend_from_slice(
                            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                        ),
                        Arith::Full(e) => server_error(out, e),
                    }
                }
            }
            Command::Delete { key, noreply } => {
                let mut s = self.lock();
                let found = s.lookup(key, now);
                if let Some(id) = found {
                    s.unlink(id);
                    s.counters.delete_hits += 1;
                } else {
                    s.counters.delete_misses += 1;
                }
                drop(s);
                if !noreply {
                    out.extend_from_slice(if found.is_some() {
                        b"DELETED\r\n"
                    } else {
                        b"NOT_FOUND\r\n"
                    });
                }
            }
            Command::Touch {
                key,
                exptime,
                noreply,
            } => {
                let mut s = self.lock();
                s.counters.cmd_touch += 1;
                let found = s.lookup(key, now);
                if let Some(id) = found {
                    s.set_exptime(id, absolute_exptime(*exptime, now));
                    s.fetched(id, now, true);
                    s.counters.touch_hits += 1;
                } else {
                    s.counters.touch_misses += 1;
                }
                drop(s);
                if !noreply {
                    out.extend_from_slice(if found.is_some() {
                        b"TOUCHED\r\n"
                    } else {
                        b"NOT_FOUND\r\n"
                    });
                }
            }
            Command::FlushAll { delay, noreply } => {
                if !self.settings.flush_enabled {
                    out.extend_from_slice(b"CLIENT_ERROR flush_all not allowed\r\n");
                    return After::Continue;
                }
                let at = if *delay > 0 {
                    absolute_exptime(*delay, now)
                } else {
                    now
                };
                let mut s = self.lock();
                s.counters.cmd_flush += 1;
                s.flush(at, now);
                drop(s);
                if !noreply {
                    out.extend_from_slice(b"OK\r\n");
                }
            }
            Command::Stats { group } => self.stats(*group, now, out),
            Command::Version => {
                let _ = write!(out, "VERSION {VERSION}\r\n");
            }
            Command::Verbosity { noreply } => {
                if !noreply {
                    out.extend_from_slice(b"OK\r\n");
                }
            }
            Command::Quit => return After::Close,
            Command::MetaNoop => out.extend_from_slice(b"MN\r\n"),
            Command::MetaGet {
                key,
                raw_key,
                flags,
            } => self.meta_get(key, raw_key, flags, now, out),
            Command::MetaSet {
                key,
                raw_key,
                data,
                flags,
            } => self.meta_set(key, raw_key, data, flags, now, out),
            Command::MetaDelete {
                key,
                raw_key,
                flags,
            } => self.meta_delete(key, raw_key, flags, now, out),
            Command::MetaArith {
                key,
                raw_key,
                flags,
            } => self.meta_arith(key, raw_key, flags, now, out),
            Command::MetaDebug { key } => {
                let mut s = self.lock();
                match s.lookup(key, now) {
                    Some(id) => {
                        let h = s.header(id);
                        let exp = if h.exptime == 0 { -1 } else { h.exptime - now };
                        let _ = write!(out, "ME ");
                        out.extend_from_slice(s.view(id).key);
                        let _ = write!(
                            out,
                            " exp={exp} la={} cas={} fetch={} cls={} size={}\r\n",
                            now - h.atime,
                            h.cas,
                            if h.state & FETCHED != 0 { "yes" } else { "no" },
                            h.class + 1,
                            HEADER + h.nkey as usize + h.nbytes as usize,
                        );
                    }
                    None => out.extend_from_slice(b"EN\r\n"),
                }
            }
        }
        After::Continue
    }

    fn get(&self, keys: &[&[u8]], with_cas: bool, touch: Option<i64>, now: i64, out: &mut Vec<u8>) {
        let mut s = self.lock();
        for key in keys {
            s.counters.cmd_get += 1;
            if touch.is_some() {
                s.counters.cmd_touch += 1;
            }
            let Some(id) = s.lookup(key, now) else {
                s.counters.get_misses += 1;
                if touch.is_some() {
                    s.counters.touch_misses += 1;
                }
                continue;
            };
            s.counters.get_hits += 1;
            if let Some(exp) = touch {
                s.counters.touch_hits += 1;
                s.set_exptime(id, absolute_exptime(exp, now));
            }
            s.fetched(id, now, true);
            let v = s.view(id);
            out.extend_from_slice(b"VALUE ");
            out.extend_from_slice(v.key);
            let _ = write!(out, " {} {}", v.header.flags, v.value.len());
            if with_cas {
                let _ = write!(out, " {}", v.header.cas);
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(v.value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"END\r\n");
    }

    fn store_cmd(&self, req: &StoreReq<'_>, now: i64, out: &mut Vec<u8>) {
        let mut s = self.lock();
        s.counters.cmd_set += 1;
        let exptime = absolute_exptime(req.exptime, now);
        let current = s.lookup(req.key, now);
        let result = match (req.mode, current) {
            (StoreMode::Set, _) => {
                stored(s.store(req.key, req.flags, exptime, &[req.data], None, now))
            }
            (StoreMode::Add, Some(id)) => {
                // memcached bumps the existing item: a failed add is a sign it is in use.
                s.fetched(id, now, true);
                Ok("NOT_STORED")
            }
            (StoreMode::Add, None) => {
                stored(s.store(req.key, req.flags, exptime, &[req.data], None, now))
            }
            (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => Ok("NOT_STORED"),
            (StoreMode::Replace, Some(_)) => {
                stored(s.store(req.key, req.flags, exptime, &[req.data], None, now))
            }
            (StoreMode::Append | StoreMode::Prepend, Some(id)) => {
                // Old flags and expiry stay (memcached ignores the request's).
                let v = s.view(id);
                let (flags, exp, old) = (v.header.flags, v.header.exptime, v.value.to_vec());
                let parts: [&[u8]; 2] = if req.mode == StoreMode::Append {
                    [&old, req.data]
                } else {
                    [req.data, &old]
                };
                stored(s.store(req.key, flags, exp, &parts, None, now))
            }
            (StoreMode::Cas, None) => {
                s.counters.cas_misses += 1;
                Ok("NOT_FOUND")
            }
            (StoreMode::Cas, Some(id)) => {
                if s.header(id).cas != req.cas {
                    s.counters.cas_badval += 1;
                    Ok("EXISTS")
                } else {
                    s.counters.cas_hits += 1;
                    stored(s.store(req.key, req.flags, exptime, &[req.data], None, now))
                }
            }
        };
        drop(s);
        if req.noreply {
            return;
        }
        match result {
            Ok(word) => {
                out.extend_from_slice(word.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Err(e) => server_error(out, e),
        }
    }

    fn meta_get(&self, key: &[u8], raw_key: &[u8], f: &MetaFlags<'_>, now: i64, out: &mut Vec<u8>) {
        let mut s = self.lock();
        s.counters.cmd_get += 1;
        let mut won = false;
        let id = match s.lookup(key, now) {
            Some(id) => {
                s.counters.get_hits += 1;
                id
            }
            None => {
                s.counters.get_misses += 1;
                let Some(ttl) = f.vivify else {
                    if !f.quiet {
                        meta_reply(out, "EN", raw_key, f, None);
                    }
                    return;
                };
                // Create an empty placeholder; this client wins the right to fill it.
                match s.store(key, 0, absolute_exptime(ttl, now), &[], None, now) {
                    Ok(id) => {
                        s.set_state(id, WON, 0);
                        won = true;
                        id
                    }
                    Err(e) => return server_error(out, e),
                }
            }
        };
        let h = s.header(id);
        let already_won = !won && h.state & WON != 0;
        let old_exptime = h.exptime;
        if let Some(ttl) = f.ttl {
            s.set_exptime(id, absolute_exptime(ttl, now));
        }
        if let Some(r) = f.recache {
            // Recache when the remaining TTL is below R: the first such client wins.
            let exptime = if f.recache_sees_new_ttl {
                s.header(id).exptime
            } else {
                old_exptime
            };
            if !already_won && !won && exptime != 0 && exptime < absolute_exptime(r, now) {
                s.set_state(id, WON, 0);
                won = true;
            }
        }
        if h.state & STALE != 0 && !already_won && !won {
            // The first client to see a stale item is asked to recache it.
            s.set_state(id, WON, 0);
            won = true;
        }
        let fetched_before = h.state & FETCHED != 0;
        s.fetched(id, now, !f.no_bump);
        let h = s.header(id);
        let v = s.view(id);
        if f.value {
            let _ = write!(out, "VA {}", v.value.len());
        } else {
            out.extend_from_slice(b"HD");
        }
        for &c in &f.ret {
            match c {
                b'c' => {
                    let _ = write!(out, " c{}", h.cas);
                }
                b'f' => {
                    let _ = write!(out, " f{}", h.flags);
                }
                b'h' => {
                    let _ = write!(out, " h{}", u8::from(fetched_before));
                }
                b'l' => {
                    let _ = write!(out, " l{}", now - h.atime.min(now));
                }
                b's' => {
                    let _ = write!(out, " s{}", v.value.len());
                }
                b't' => {
                    let ttl = if h.exptime == 0 {
                        -1
                    } else {
                        (h.exptime - now).max(0)
                    };
                    let _ = write!(out, " t{ttl}");
                }
                _ => echo_flag(out, c, raw_key, f),
            }
        }
        // memcached's order: Z (a token was already handed out), then X (stale), then W.
        if already_won {
            out.extend_from_slice(b" Z");
        }
        if h.state & STALE != 0 {
            out.extend_from_slice(b" X");
        }
        if won {
            out.extend_from_slice(b" W");
        }
        out.extend_from_slice(b"\r\n");
        if f.value {
            out.extend_from_slice(v.value);
            out.extend_from_slice(b"\r\n");
        }
    }

    fn meta_set(
        &self,
        key: &[u8],
        raw_key: &[u8],
        data: &[u8],
        f: &MetaFlags<'_>,
        now: i64,
        out: &mut Vec<u8>,
    ) {
        let mode = match f.mode.unwrap_or(b'S') {
            b'S' => StoreMode::Set,
            b'E' => StoreMode::Add,
            b'A' => StoreMode::Append,
            b'P' => StoreMode::Prepend,
            b'R' => StoreMode::Replace,
            _ => {
                out.extend_from_slice(b"CLIENT_ERROR invalid mode for ms M token\r\n");
                return;
            }
        };
        let mut s = self.lock();
        s.counters.cmd_set += 1;
        let exptime = absolute_exptime(f.ttl.unwrap_or(0), now);
        let flags = f.client_flags.unwrap_or(0);
        let current = s.lookup(key, now);
        let mut invalidated = false;
        if let (Some(want), Some(id)) = (f.compare_cas, current) {
            let have = s.header(id).cas;
            // `I`: an older cas still stores, marking the new value stale (memcached).
            if have != want && !(f.invalidate && want < have) {
                s.counters.cas_badval += 1;
                drop(s);
                return meta_reply(out, "EX", raw_key, f, None);
            }
            invalidated = f.invalidate && want < have;
            s.counters.cas_hits += 1;
        } else if f.compare_cas.is_some() {
            s.counters.cas_misses += 1;
            drop(s);
            return meta_reply(out, "NF", raw_key, f, None);
        }
        let result = match (mode, current) {
            (StoreMode::Add, Some(_))
            | (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => Ok(None),
            (StoreMode::Append | StoreMode::Prepend, Some(id)) => {
                let v = s.view(id);
                let (fl, exp, old) = (v.header.flags, v.header.exptime, v.value.to_vec());
                let parts: [&[u8]; 2] = if mode == StoreMode::Append {
                    [&old, data]
                } else {
                    [data, &old]
                };
                s.store(key, fl, exp, &parts, f.new_cas, now).map(Some)
            }
            _ => s
                .store(key, flags, exptime, &[data], f.new_cas, now)
                .map(Some),
        };
        let reply = match result {
            Ok(Some(id)) => {
                if invalidated {
                    s.set_state(id, STALE, 0);
                }
                let cas = s.header(id).cas;
                drop(s);
                if f.quiet {
                    return;
                }
                meta_reply(out, "HD", raw_key, f, Some(cas));
                return;
            }
            Ok(None) => "NS",
            Err(e) => {
                drop(s);
                return server_error(out, e);
            }
        };
        drop(s);
        meta_reply(out, reply, raw_key, f, None);
    }

    fn meta_delete(
        &self,
        key: &[u8],
        raw_key: &[u8],
        f: &MetaFlags<'_>,
        now: i64,
        out: &mut Vec<u8>,
    ) {
        let mut s = self.lock();
        let Some(id) = s.lookup(key, now) else {
            s.counters.delete_misses += 1;
            drop(s);
            return meta_reply(out, "NF", raw_key, f, None);
        };
        if let Some(want) = f.compare_cas {
            if s.header(id).cas != want {
                drop(s);
                return meta_reply(out, "EX", raw_key, f, None);
            }
        }
        s.counters.delete_hits += 1;
        if f.invalidate {
            // Keep the item, stale, for clients to serve while one of them recaches it.
            s.set_state(id, STALE, WON);
            if let Some(ttl) = f.ttl {
                s.set_exptime(id, absolute_exptime(ttl, now));
            }
            s.new_cas(id, f.new_cas);
        } else if f.remove_value {
            let v = s.view(id);
            let (key_copy, flags, exp) = (v.key.to_vec(), v.header.flags, v.header.exptime);
            if let Err(e) = s.store(&key_copy, flags, exp, &[], f.new_cas, now) {
                drop(s);
                return server_error(out, e);
            }
        } else {
            s.unlink(id);
        }
        drop(s);
        if !f.quiet {
            meta_reply(out, "HD", raw_key, f, None);
        }
    }

    fn meta_arith(
        &self,
        key: &[u8],
        raw_key: &[u8],
        f: &MetaFlags<'_>,
        now: i64,
        out: &mut Vec<u8>,
    ) {
        let incr = match f.mode.unwrap_or(b'I') {
            b'I' | b'+' => true,
            b'D' | b'-' => false,
            _ => {
                out.extend_from_slice(b"CLIENT_ERROR invalid mode for ma M token\r\n");
                return;
            }
        };
        let delta = f.delta.unwrap_or(1);
        let mut s = self.lock();
        if let (Some(want), Some(id)) = (f.compare_cas, s.lookup(key, now)) {
            if s.header(id).cas != want {
                drop(s);
                return meta_reply(out, "EX", raw_key, f, None);
            }
        }
        let mut reply = arith(&mut s, key, incr, delta, now, f.new_cas);
        if reply == Arith::NotFound {
            if let Some(ttl) = f.vivify {
                let initial = f.initial.unwrap_or(0).to_string();
                reply = match s.store(
                    key,
                    0,
                    absolute_exptime(ttl, now),
                    &[initial.as_bytes()],
                    f.new_cas,
                    now,
                ) {
                    Ok(id) => Arith::Done {
                        value: f.initial.unwrap_or(0),
                        id,
                    },
                    Err(e) => Arith::Full(e),
                };
            }
        }
        let c = &mut s.counters;
        match (&reply, incr) {
            (Arith::NotFound, true) => c.incr_misses += 1,
            (Arith::NotFound, false) => c.decr_misses += 1,
            (_, true) => c.incr_hits += 1,
            (_, false) => c.decr_hits += 1,
        }
        match reply {
            Arith::Done { value, id } => {
                if let Some(ttl) = f.ttl {
                    s.set_exptime(id, absolute_exptime(ttl, now));
                }
                let h = s.header(id);
                drop(s);
                if f.quiet && !f.value {
                    return;
                }
                let text = value.to_string();
                if f.value {
                    let _ = write!(out, "VA {}", text.len());
                } else {
                    out.extend_from_slice(b"HD");
                }
                for &c in &f.ret {
                    match c {
                        b'c' => {
                            let _ = write!(out, " c{}", h.cas);
                        }
                        b't' => {
                            let ttl = if h.exptime == 0 {
                                -1
                            } else {
                                (h.exptime - now).max(0)
                            };
                            let _ = write!(out, " t{ttl}");
                        }
                        _ => echo_flag(out, c, raw_key, f),
                    }
                }
                out.extend_from_slice(b"\r\n");
                if f.value {
                    out.extend_from_slice(text.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
            }
            Arith::NotFound => {
                drop(s);
                meta_reply(out, "NF", raw_key, f, None);
            }
            Arith::NonNumeric => out.extend_from_slice(
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            Arith::Full(e) => server_error(out, e),
        }
    }

    fn stats(&self, group: Option<&[u8]>, now: i64, out: &mut Vec<u8>) {
        let s = self.lock();
        let mut stat = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(out, "STAT {name} {value}\r\n");
        };
        match group {
            None => {
                let c = &s.counters;
                stat("pid", &self.pid);
                stat("uptime", &(now - self.started));
                stat("time", &now);
                stat("version", &VERSION);
                stat("pointer_size", &64);
                stat(
                    "curr_connections",
                    &self.conns.current.load(Ordering::Relaxed),
                );
                stat(
                    "total_connections",
                    &self.conns.total.load(Ordering::Relaxed),
                );
                stat(
                    "rejected_connections",
                    &self.conns.rejected.load(Ordering::Relaxed),
                );
                stat(
                    "accepting_conns",
                    &u8::from(!self.conns.listen_paused.load(Ordering::Relaxed)),
                );
                stat(
                    "listen_disabled_num",
                    &self.conns.listen_disabled.load(Ordering::Relaxed),
                );
                stat(
                    "time_in_listen_disabled_us",
                    &self.conns.listen_disabled_us.load(Ordering::Relaxed),
                );
                stat("cmd_get", &c.cmd_get);
                stat("cmd_set", &c.cmd_set);
                stat("cmd_flush", &c.cmd_flush);
                stat("cmd_touch", &c.cmd_touch);
                stat("get_hits", &c.get_hits);
                stat("get_misses", &c.get_misses);
                stat("get_expired", &c.get_expired);
                stat("get_flushed", &c.get_flushed);
                stat("delete_misses", &c.delete_misses);
                stat("delete_hits", &c.delete_hits);
                stat("incr_misses", &c.incr_misses);
                stat("incr_hits", &c.incr_hits);
                stat("decr_misses", &c.decr_misses);
                stat("decr_hits", &c.decr_hits);
                stat("cas_misses", &c.cas_misses);
                stat("cas_hits", &c.cas_hits);
                stat("cas_badval", &c.cas_badval);
                stat("touch_hits", &c.touch_hits);
                stat("touch_misses", &c.touch_misses);
                stat("threads", &self.settings.threads);
                stat("bytes", &s.bytes());
                stat("curr_items", &s.len());
                stat("total_items", &c.total_items);
                stat("expired_unfetched", &c.expired_unfetched);
                stat("evicted_unfetched", &c.evicted_unfetched);
                stat("evictions", &c.evictions);
                stat("reclaimed", &c.reclaimed);
                stat("slabs_moved", &c.slabs_moved);
                stat("limit_maxbytes", &self.settings.memory_limit);
                stat(
                    "total_malloced",
                    &(s.slabs().pages_used() as usize * s.slabs().page_size()),
                );
                let (hot_used, hot_total) = s.slabs().hot_pages();
                if hot_total > 0 {
                    let p = &self.placement;
                    stat("hot_placement", &p.enabled.load(Ordering::Relaxed));
                    stat("hot_area_pages", &hot_total);
                    stat("hot_area_pages_used", &hot_used);
                    stat("hot_items_moved", &c.hot_items_moved);
                    stat("hot_pages_vacated", &c.hot_pages_vacated);
                    // What the kernel maps by huge pages now, in the whole item memory and
                    // in the hot area (read from the page tables).
                    let mem = s.slabs().memory();
                    let base = mem.base.as_ptr() as usize;
                    let hot_at = base + s.slabs().page_offset(s.slabs().pages_total() - hot_total);
                    let huge = |from: usize, to: usize| {
                        kioku_hugepage::huge_mapped_bytes(kioku_hugepage::PageRange::new(from, to))
                            .unwrap_or(0)
                    };
                    stat("huge_bytes", &huge(base, base + mem.len));
                    stat("huge_bytes_hot_area", &huge(hot_at, base + mem.len));
                }
                if self.pooled {
                    let p = &self.persist;
                    stat("checkpoint_epoch", &p.epoch.load(Ordering::Relaxed));
                    stat("checkpoint_failures", &p.failures.load(Ordering::Relaxed));
                    stat("checkpoint_last_us", &p.last_us.load(Ordering::Relaxed));
                    stat("restored_items", &p.restored_items.load(Ordering::Relaxed));
                    stat("restore_us", &p.restore_us.load(Ordering::Relaxed));
                }
            }
            Some(b"settings") => {
                let st = &self.settings;
                stat("maxbytes", &st.memory_limit);
                stat("maxconns", &st.max_connections);
                stat("tcpport", &st.port);
                stat("udpport", &0);
                stat("inter", &st.interface);
                stat("growth_factor", &st.growth_factor);
                stat("evictions", &if st.evictions { "on" } else { "off" });
                stat("cas_enabled", &if st.cas_enabled { "yes" } else { "no" });
                stat("num_threads", &st.threads);
                stat("item_size_max", &st.item_size_max);
                stat("slab_page_size", &s.slabs().page_size());
                stat(
                    "flush_enabled",
                    &if st.flush_enabled { "yes" } else { "no" },
                );
            }
            Some(b"slabs") => {
                let slabs = s.slabs();
                let mut active = 0;
                for (i, c) in slabs
                    .classes
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| !c.pages.is_empty())
                {
                    active += 1;
                    let n = i + 1;
                    let total = c.pages.len() as u64 * u64::from(c.per_page);
                    stat(&format!("{n}:chunk_size"), &c.size);
                    stat(&format!("{n}:chunks_per_page"), &c.per_page);
                    stat(&format!("{n}:total_pages"), &c.pages.len());
                    stat(&format!("{n}:total_chunks"), &total);
                    stat(&format!("{n}:used_chunks"), &c.items);
                    stat(&format!("{n}:free_chunks"), &c.free.len());
                }
                stat("active_slabs", &active);
                stat(
                    "total_malloced",
                    &(slabs.pages_used() as usize * slabs.page_size()),
                );
            }
            Some(b"items") => {
                let slabs = s.slabs();
                for (i, c) in slabs
                    .classes
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.items > 0)
                {
                    let n = i + 1;
                    stat(&format!("items:{n}:number"), &c.items);
                    let age = if c.tail == crate::slab::ItemId::NONE {
                        0
                    } else {
                        now - s.header(c.tail).atime
                    };
                    stat(&format!("items:{n}:age"), &age);
                    stat(&format!("items:{n}:evicted"), &c.evictions);
                    stat(&format!("items:{n}:pages_moved_out"), &c.pages_moved_out);
                }
            }
            Some(b"sizes") => {}
            Some(b"reset") => {
                drop(s);
                self.lock().counters = Default::default();
                out.extend_from_slice(b"RESET\r\n");
                return;
            }
            Some(_) => {
                out.extend_from_slice(b"ERROR\r\n");
                return;
            }
        }
        out.extend_from_slice(b"END\r\n");
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Arith {
    Done { value: u64, id: crate::slab::ItemId },
    NotFound,
    NonNumeric,
    Full(StoreError),
}

/// incr/decr: the value must be a decimal number (trailing spaces allowed); incr wraps at
/// 2^64, decr stops at 0 (memcached). The item keeps its flags and expiry, with a new cas.
fn arith(s: &mut Store, key: &[u8], incr: bool, delta: u64, now: i64, cas: Option<u64>) -> Arith {
    let Some(id) = s.lookup(key, now) else {
        return Arith::NotFound;
    };
    let v = s.view(id);
    let digits = v.value.strip_suffix(b"\r\n").unwrap_or(v.value);
    let end = digits.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    let Some(old) = crate::protocol::unsigned(&digits[..end]) else {
        return Arith::NonNumeric;
    };
    let value = if incr {
        old.wrapping_add(delta)
    } else {
        old.saturating_sub(delta)
    };
    let (flags, exp, old_len) = (v.header.flags, v.header.exptime, v.value.len());
    // memcached rewrites a shorter number in place, padded with spaces to the old length;
    // clients see the same bytes here.
    let mut text = value.to_string();
    if text.len() < old_len {
        text.extend(std::iter::repeat_n(' ', old_len - text.len()));
    }
    match s.store(key, flags, exp, &[text.as_bytes()], cas, now) {
        Ok(id) => {
            s.fetched(id, now, true);
            Arith::Done { value, id }
        }
        Err(e) => Arith::Full(e),
    }
}

fn stored(r: Result<crate::slab::ItemId, StoreError>) -> Result<&'static str, StoreError> {
    r.map(|_| "STORED")
}

fn server_error(out: &mut Vec<u8>, e: StoreError) {
    let text: &[u8] = match e {
        StoreError::TooLarge => b"SERVER_ERROR object too large for cache\r\n",
        StoreError::OutOfMemory => b"SERVER_ERROR out of memory storing object\r\n",
    };
    out.extend_from_slice(text);
}

/// A reply code with the echoed flags (`O`, `k`, `b`) and, when stored, `c`.
fn meta_reply(out: &mut Vec<u8>, code: &str, raw_key: &[u8], f: &MetaFlags<'_>, cas: Option<u64>) {
    out.extend_from_slice(code.as_bytes());
    for &c in &f.ret {
        match (c, cas) {
            (b'c', Some(cas)) => {
                let _ = write!(out, " c{cas}");
            }
            _ => echo_flag(out, c, raw_key, f),
        }
    }
    out.extend_from_slice(b"\r\n");
}

fn echo_flag(out: &mut Vec<u8>, c: u8, raw_key: &[u8], f: &MetaFlags<'_>) {
    match c {
        b'O' => {
            out.extend_from_slice(b" O");
            out.extend_from_slice(f.opaque.unwrap_or_default());
        }
        b'k' => {
            out.extend_from_slice(b" k");
            out.extend_from_slice(raw_key);
            if f.base64 {
                out.extend_from_slice(b" b");
            }
        }
        _ => {}
    }
}
