//! The memcached text protocol and the meta commands of memcached 1.6: one request parsed from
//! the front of a byte buffer, without copying. The parser is pure (bytes in, a command or a
//! typed error out) so that it can be fuzzed; the server owns every side effect.
//!
//! Limits are the server's, passed in: a request line is at most [`MAX_LINE`] bytes and a value
//! at most the `-I` item size, so a client can make a connection buffer no more than that.

use std::borrow::Cow;

use base64::Engine as _;

/// The longest key memcached accepts (bytes).
pub const MAX_KEY_LEN: usize = 250;
/// The longest request line accepted (bytes, without the value). Long enough for a multi-get of
/// ~60 keys of maximum length; a longer line closes the connection, as memcached does.
pub const MAX_LINE: usize = 16 * 1024;
/// Relative expiry times above this (30 days, in seconds) are absolute Unix times (memcached).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// How a storage command stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if absent.
    Add,
    /// Store only if present.
    Replace,
    /// Append to a present value.
    Append,
    /// Prepend to a present value.
    Prepend,
    /// Store only if the cas unique still matches.
    Cas,
}

/// A storage request (`set`/`add`/`replace`/`append`/`prepend`/`cas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store<'a> {
    /// How to store.
    pub mode: StoreMode,
    /// The key.
    pub key: &'a [u8],
    /// The client's opaque flags.
    pub flags: u32,
    /// Expiry as sent (see [`REALTIME_MAXDELTA`]).
    pub exptime: i64,
    /// The value (without its `\r\n`).
    pub data: &'a [u8],
    /// The cas unique of a `cas` command.
    pub cas: u64,
    /// `noreply` was given.
    pub noreply: bool,
}

/// Flags of a meta command (`mg`, `ms`, `md`, `ma`), decoded. Return flags are echoed in the
/// order the client gave them (`ret`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    /// Return flags requested, in order: `b c f h k l O s t` (`O` and `k` echo, the others
    /// report). `v` is kept apart (`value`).
    pub ret: Vec<u8>,
    /// `b`: the key is base64-encoded.
    pub base64: bool,
    /// `O<token>`: opaque, echoed.
    pub opaque: Option<&'a [u8]>,
    /// `q`: suppress the reply that means "as expected" (EN for mg, HD for ms, md and ma).
    pub quiet: bool,
    /// `v`: return the value (mg, ma).
    pub value: bool,
    /// `T<ttl>`: set/update the TTL.
    pub ttl: Option<i64>,
    /// `N<ttl>`: create on miss (mg: an empty item; ma: with `J`).
    pub vivify: Option<i64>,
    /// `R<ttl>`: mg hands out the recache token (`W`) when the item's remaining TTL is below
    /// this.
    pub recache: Option<i64>,
    /// `T` came before `R`: `R` sees the TTL `T` set (memcached applies the flags in order).
    pub recache_sees_new_ttl: bool,
    /// `C<cas>`: compare the cas unique.
    pub compare_cas: Option<u64>,
    /// `E<cas>`: use this cas unique for the new version.
    pub new_cas: Option<u64>,
    /// `F<flags>`: client flags (ms).
    pub client_flags: Option<u32>,
    /// `M<mode>`: ms mode (`S E A P R`) or ma mode (`I + D -`), upper-cased.
    pub mode: Option<u8>,
    /// `D<delta>` (ma).
    pub delta: Option<u64>,
    /// `J<initial>` (ma).
    pub initial: Option<u64>,
    /// `I`: invalidate (ms/md: mark stale instead of removing/when cas is older).
    pub invalidate: bool,
    /// `x`: md removes the value but keeps the item.
    pub remove_value: bool,
    /// `u`: mg does not bump the item in the LRU.
    pub no_bump: bool,
}

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `get`/`gets` (`touch: None`) or `gat`/`gats` (`touch: Some(exptime)`).
    Get {
        /// The keys, in order.
        keys: Vec<&'a [u8]>,
        /// `gets`/`gats`: return cas uniques.
        with_cas: bool,
        /// The new expiry of `gat`/`gats`.
        touch: Option<i64>,
    },
    /// A storage command.
    Store(Store<'a>),
    /// `incr`/`decr`.
    Arith {
        /// The key.
        key: &'a [u8],
        /// `incr` (else `decr`).
        incr: bool,
        /// The amount.
        delta: u64,
        /// `noreply` was given.
        noreply: bool,
    },
    /// `delete`.
    Delete {
        /// The key.
        key: &'a [u8],
        /// `noreply` was given.
        noreply: bool,
    },
    /// `touch`.
    Touch {
        /// The key.
        key: &'a [u8],
        /// The new expiry.
        exptime: i64,
        /// `noreply` was given.
        noreply: bool,
    },
    /// `flush_all [delay]`.
    FlushAll {
        /// Seconds from now (or an absolute time, as for expiry).
        delay: i64,
        /// `noreply` was given.
        noreply: bool,
    },
    /// `stats [group]`.
    Stats {
        /// The group (`slabs`, `items`, `settings`, `reset`, ...), if any.
        group: Option<&'a [u8]>,
    },
    /// `version`.
    Version,
    /// `verbosity N`.
    Verbosity {
        /// `noreply` was given.
        noreply: bool,
    },
    /// `quit`.
    Quit,
    /// `mg <key> <flags>*`.
    MetaGet {
        /// The key (decoded if base64).
        key: Cow<'a, [u8]>,
        /// The key as sent (echoed by `k`).
        raw_key: &'a [u8],
        /// The flags.
        flags: MetaFlags<'a>,
    },
    /// `ms <key> <datalen> <flags>*` and its value.
    MetaSet {
        /// The key (decoded if base64).
        key: Cow<'a, [u8]>,
        /// The key as sent.
        raw_key: &'a [u8],
        /// The value.
        data: &'a [u8],
        /// The flags.
        flags: MetaFlags<'a>,
    },
    /// `md <key> <flags>*`.
    MetaDelete {
        /// The key (decoded if base64).
        key: Cow<'a, [u8]>,
        /// The key as sent.
        raw_key: &'a [u8],
        /// The flags.
        flags: MetaFlags<'a>,
    },
    /// `ma <key> <flags>*`.
    MetaArith {
        /// The key (decoded if base64).
        key: Cow<'a, [u8]>,
        /// The key as sent.
        raw_key: &'a [u8],
        /// The flags.
        flags: MetaFlags<'a>,
    },
    /// `mn`.
    MetaNoop,
    /// `me <key> [b]`.
    MetaDebug {
        /// The key (decoded if base64).
        key: Cow<'a, [u8]>,
    },
}

/// What was wrong with a request; [`ErrorKind::reply`] is what memcached answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Unknown command or wrong number of tokens.
    UnknownCommand,
    /// A malformed token (number, key length, ...).
    BadFormat,
    /// `delete` with extra tokens.
    BadDelete,
    /// The value was not followed by `\r\n`.
    BadDataChunk,
    /// The value is larger than the item size limit (`-I`).
    TooLarge,
    /// `incr`/`decr` delta is not a 64-bit unsigned number.
    BadDelta,
    /// `touch`/`gat` expiry is not a number.
    BadExptime,
    /// A meta flag is unknown or malformed.
    BadFlag,
    /// A meta flag's number does not parse (`T`, `N`, `R`, `C`).
    BadToken,
    /// A base64 key does not decode.
    BadKeyEncoding,
    /// The request line is longer than [`MAX_LINE`] (the connection is closed).
    LineTooLong,
}

impl ErrorKind {
    /// The protocol reply.
    pub fn reply(self) -> &'static [u8] {
        match self {
            ErrorKind::UnknownCommand => b"ERROR\r\n",
            ErrorKind::BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            ErrorKind::BadDelete => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            ErrorKind::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            ErrorKind::TooLarge => b"SERVER_ERROR object too large for cache\r\n",
            ErrorKind::BadDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            ErrorKind::BadExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            ErrorKind::BadFlag => b"CLIENT_ERROR invalid flag\r\n",
            ErrorKind::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            ErrorKind::BadKeyEncoding => b"CLIENT_ERROR error decoding key\r\n",
            ErrorKind::LineTooLong => b"CLIENT_ERROR line too long\r\n",
        }
    }
}

/// A request the server answers with an error. `consumed` bytes are dropped from the buffer,
/// then `swallow` more as they arrive (the value of a refused store), unless `close`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtoError {
    /// What was wrong.
    pub kind: ErrorKind,
    /// Bytes of the buffer this request used.
    pub consumed: usize,
    /// Bytes still to come that belong to this request and must be discarded.
    pub swallow: usize,
    /// The connection cannot be resynchronised and must be closed.
    pub close: bool,
    /// The key of a refused `set`: memcached drops the old value so that no stale value
    /// outlives a failed update (offset and length within the line).
    pub stale_key: Option<(usize, usize)>,
}

/// The parser's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest value accepted (`-I`, minus the item header).
    pub max_value: usize,
}

/// Parse one request from the front of `buf`. `Ok(None)`: more bytes are needed (a partial
/// line, or a value not yet complete); `Ok(Some((cmd, n)))`: the request used `n` bytes.
pub fn parse<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<Option<(Command<'a>, usize)>, ProtoError> {
    let Some(nl) = memchr(b'\n', &buf[..buf.len().min(MAX_LINE + 1)]) else {
        if buf.len() > MAX_LINE {
            return Err(err(ErrorKind::LineTooLong, buf.len()).closing());
        }
        return Ok(None);
    };
    let line_end = nl + 1;
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let tokens: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let Some(&name) = tokens.first() else {
        return Err(err(ErrorKind::UnknownCommand, line_end));
    };
    let args = &tokens[1..];
    let line_error = |kind| err(kind, line_end);
    let cmd = match name {
        b"get" | b"gets" => Command::Get {
            keys: keys(args).map_err(line_error)?,
            with_cas: name == b"gets",
            touch: None,
        },
        b"gat" | b"gats" => {
            let (&exp, rest) = args
                .split_first()
                .ok_or(line_error(ErrorKind::UnknownCommand))?;
            let exptime = signed(exp).ok_or(line_error(ErrorKind::BadExptime))?;
            Command::Get {
                keys: keys(rest).map_err(line_error)?,
                with_cas: name == b"gats",
                touch: Some(exptime),
            }
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            return parse_store(buf, line, line_end, name, args, limits);
        }
        b"incr" | b"decr" => {
            let (args, noreply) = noreply(args);
            let [key, delta] = args else {
                return Err(line_error(ErrorKind::UnknownCommand));
            };
            Command::Arith {
                key: key_ok(key).map_err(line_error)?,
                incr: name == b"incr",
                delta: unsigned(delta).ok_or(line_error(ErrorKind::BadDelta))?,
                noreply,
            }
        }
        b"delete" => {
            let (rest, noreply) = noreply(args);
            let key = match rest {
                [key] => key,
                [key, b"0"] => key,
                [] if args.is_empty() => return Err(line_error(ErrorKind::UnknownCommand)),
                _ => return Err(line_error(ErrorKind::BadDelete)),
            };
            Command::Delete {
                key: key_ok(key).map_err(line_error)?,
                noreply,
            }
        }
        b"touch" => {
            let (args, noreply) = noreply(args);
            let [key, exp] = args else {
                return Err(line_error(ErrorKind::UnknownCommand));
            };
            Command::Touch {
                key: key_ok(key).map_err(line_error)?,
                exptime: signed(exp).ok_or(line_error(ErrorKind::BadExptime))?,
                noreply,
            }
        }
        b"flush_all" => {
            let (args, noreply) = noreply(args);
            let delay = match args {
                [] => 0,
                [d] => signed(d).ok_or(line_error(ErrorKind::BadFormat))?,
                _ => return Err(line_error(ErrorKind::UnknownCommand)),
            };
            Command::FlushAll { delay, noreply }
        }
        b"stats" => match args {
            [] => Command::Stats { group: None },
            [g, ..] => Command::Stats { group: Some(g) },
        },
        // memcached ignores extra tokens of these two.
        b"version" => Command::Version,
        b"quit" => Command::Quit,
        b"verbosity" => {
            let (args, noreply) = noreply(args);
            match args {
                [level] if unsigned(level).is_some() => Command::Verbosity { noreply },
                [] if noreply => Command::Verbosity { noreply },
                [_] => return Err(line_error(ErrorKind::BadFormat)),
                _ => return Err(line_error(ErrorKind::UnknownCommand)),
            }
        }
        b"mn" => Command::MetaNoop,
        b"mg" | b"md" | b"ma" | b"me" => {
            let (&raw_key, rest) = args.split_first().ok_or(line_error(ErrorKind::BadFormat))?;
            let flags = meta_flags(rest).map_err(line_error)?;
            let key = meta_key(raw_key, flags.base64).map_err(line_error)?;
            match name {
                b"mg" => Command::MetaGet {
                    key,
                    raw_key,
                    flags,
                },
                b"md" => Command::MetaDelete {
                    key,
                    raw_key,
                    flags,
                },
                b"ma" => Command::MetaArith {
                    key,
                    raw_key,
                    flags,
                },
                _ => Command::MetaDebug { key },
            }
        }
        b"ms" => return parse_meta_set(buf, line_end, args, limits),
        _ => return Err(line_error(ErrorKind::UnknownCommand)),
    };
    Ok(Some((cmd, line_end)))
}

fn parse_store<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    line_end: usize,
    name: &[u8],
    args: &[&'a [u8]],
    limits: &Limits,
) -> Result<Option<(Command<'a>, usize)>, ProtoError> {
    let mode = match name {
        b"set" => StoreMode::Set,
        b"add" => StoreMode::Add,
        b"replace" => StoreMode::Replace,
        b"append" => StoreMode::Append,
        b"prepend" => StoreMode::Prepend,
        _ => StoreMode::Cas,
    };
    let (args, noreply) = noreply(args);
    let want = if mode == StoreMode::Cas { 5 } else { 4 };
    if args.len() != want {
        return Err(err(ErrorKind::UnknownCommand, line_end));
    }
    let bad = || err(ErrorKind::BadFormat, line_end);
    let key = key_ok(args[0]).map_err(|k| err(k, line_end))?;
    let flags = unsigned(args[1]).and_then(|f| u32::try_from(f).ok());
    let exptime = signed(args[2]);
    let len = signed(args[3]).filter(|&n| (0..=i64::from(i32::MAX)).contains(&n));
    let (Some(flags), Some(exptime), Some(len)) = (flags, exptime, len) else {
        return Err(bad());
    };
    let cas = if mode == StoreMode::Cas {
        unsigned(args[4]).ok_or_else(bad)?
    } else {
        0
    };
    let len = len as usize;
    if len > limits.max_value {
        let key_at = args[0].as_ptr() as usize - line.as_ptr() as usize;
        return Err(ProtoError {
            swallow: len + 2,
            stale_key: (mode == StoreMode::Set).then_some((key_at, args[0].len())),
            ..err(ErrorKind::TooLarge, line_end)
        });
    }
    let Some(data) = value(buf, line_end, len)? else {
        return Ok(None);
    };
    let store = Store {
        mode,
        key,
        flags,
        exptime,
        data,
        cas,
        noreply,
    };
    Ok(Some((Command::Store(store), line_end + len + 2)))
}

fn parse_meta_set<'a>(
    buf: &'a [u8],
    line_end: usize,
    args: &[&'a [u8]],
    limits: &Limits,
) -> Result<Option<(Command<'a>, usize)>, ProtoError> {
    let [raw_key, len, rest @ ..] = args else {
        return Err(err(ErrorKind::BadFormat, line_end));
    };
    let len = unsigned(len)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= i32::MAX as usize)
        .ok_or(err(ErrorKind::BadFormat, line_end))?;
    // From here on the value's length is known: a refused request discards its value too.
    let refuse = |kind| ProtoError {
        swallow: len + 2,
        ..err(kind, line_end)
    };
    let flags = meta_flags(rest).map_err(refuse)?;
    if len > limits.max_value {
        return Err(refuse(ErrorKind::TooLarge));
    }
    let key = meta_key(raw_key, flags.base64).map_err(refuse)?;
    let Some(data) = value(buf, line_end, len)? else {
        return Ok(None);
    };
    let cmd = Command::MetaSet {
        key,
        raw_key,
        data,
        flags,
    };
    Ok(Some((cmd, line_end + len + 2)))
}

/// The value of `len` bytes after the line, if all of it and its `\r\n` arrived.
fn value(buf: &[u8], line_end: usize, len: usize) -> Result<Option<&[u8]>, ProtoError> {
    let end = line_end + len + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(err(ErrorKind::BadDataChunk, end));
    }
    Ok(Some(&buf[line_end..end - 2]))
}

fn meta_flags<'a>(tokens: &[&'a [u8]]) -> Result<MetaFlags<'a>, ErrorKind> {
    let mut f = MetaFlags::default();
    for tok in tokens {
        let (&c, arg) = tok.split_first().expect("tokens are not empty");
        let num = || unsigned(arg).ok_or(ErrorKind::BadFlag);
        let ttl = || signed(arg).ok_or(ErrorKind::BadToken);
        match c {
            b'b' => f.base64 = true,
            b'c' | b'f' | b'h' | b'k' | b'l' | b's' | b't' => f.ret.push(c),
            b'O' => {
                if arg.len() > 32 {
                    return Err(ErrorKind::BadFlag);
                }
                f.opaque = Some(arg);
                f.ret.push(c);
            }
            b'q' => f.quiet = true,
            b'v' => f.value = true,
            b'u' => f.no_bump = true,
            b'T' => f.ttl = Some(ttl()?),
            b'N' => f.vivify = Some(ttl()?),
            b'R' => {
                f.recache = Some(ttl()?);
                f.recache_sees_new_ttl = f.ttl.is_some();
            }
            b'C' => f.compare_cas = Some(unsigned(arg).ok_or(ErrorKind::BadToken)?),
            b'E' => f.new_cas = Some(num()?),
            b'F' => f.client_flags = Some(u32::try_from(num()?).map_err(|_| ErrorKind::BadFlag)?),
            b'D' => f.delta = Some(num()?),
            b'J' => f.initial = Some(num()?),
            b'I' => f.invalidate = true,
            b'x' => f.remove_value = true,
            b'M' => match arg {
                [m] => f.mode = Some(m.to_ascii_uppercase()),
                _ => return Err(ErrorKind::BadFlag),
            },
            _ => return Err(ErrorKind::BadFlag),
        }
    }
    Ok(f)
}

fn meta_key(raw: &[u8], base64: bool) -> Result<Cow<'_, [u8]>, ErrorKind> {
    if !base64 {
        return key_ok(raw).map(Cow::Borrowed);
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|_| ErrorKind::BadKeyEncoding)?;
    if decoded.is_empty() || decoded.len() > MAX_KEY_LEN {
        return Err(ErrorKind::BadFormat);
    }
    Ok(Cow::Owned(decoded))
}

fn keys<'a>(args: &[&'a [u8]]) -> Result<Vec<&'a [u8]>, ErrorKind> {
    if args.is_empty() {
        return Err(ErrorKind::UnknownCommand);
    }
    args.iter().map(|k| key_ok(k)).collect()
}

fn key_ok(key: &[u8]) -> Result<&[u8], ErrorKind> {
    if key.len() > MAX_KEY_LEN {
        Err(ErrorKind::BadFormat)
    } else {
        Ok(key)
    }
}

fn noreply<'a, 'b>(args: &'b [&'a [u8]]) -> (&'b [&'a [u8]], bool) {
    match args.split_last() {
        Some((&b"noreply", rest)) => (rest, true),
        _ => (args, false),
    }
}

/// A decimal u64 (memcached's `safe_strtoull`: digits only, no sign, no overflow).
pub fn unsigned(tok: &[u8]) -> Option<u64> {
    if tok.is_empty() || tok.len() > 20 || !tok.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(tok).ok()?.parse().ok()
}

/// A decimal i64 with an optional `-`.
pub fn signed(tok: &[u8]) -> Option<i64> {
    let digits = tok.strip_prefix(b"-").unwrap_or(tok);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(tok).ok()?.parse().ok()
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

fn err(kind: ErrorKind, consumed: usize) -> ProtoError {
    ProtoError {
        kind,
        consumed,
        swallow: 0,
        close: false,
        stale_key: None,
    }
}

impl ProtoError {
    fn closing(self) -> Self {
        ProtoError {
            close: true,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits { max_value: 1024 };

    fn one(s: &[u8]) -> Command<'_> {
        let (cmd, n) = parse(s, &L).unwrap().unwrap();
        assert_eq!(n, s.len(), "whole request used");
        cmd
    }

    fn fails(s: &[u8]) -> ProtoError {
        parse(s, &L).unwrap_err()
    }

    #[test]
    fn storage_commands_need_their_value() {
        assert_eq!(parse(b"set k 1 0 5\r\nhel", &L), Ok(None));
        assert_eq!(parse(b"set k 1 0 5", &L), Ok(None));
        let Command::Store(s) = one(b"set k 7 -1 5 noreply\r\nhello\r\n") else {
            panic!()
        };
        assert_eq!(
            (s.key, s.flags, s.exptime, s.data, s.noreply),
            (&b"k"[..], 7, -1, &b"hello"[..], true)
        );
        let Command::Store(s) = one(b"cas k 0 0 1 99\r\nx\r\n") else {
            panic!()
        };
        assert_eq!((s.mode, s.cas), (StoreMode::Cas, 99));
    }

    #[test]
    fn bad_requests_get_memcached_replies() {
        assert_eq!(fails(b"bogus\r\n").kind, ErrorKind::UnknownCommand);
        assert_eq!(fails(b"set k x 0 1\r\nx\r\n").kind, ErrorKind::BadFormat);
        assert_eq!(fails(b"set k 0 0 -1\r\n").kind, ErrorKind::BadFormat);
        let e = fails(b"set k 0 0 5\r\nhelloXX");
        assert_eq!((e.kind, e.consumed), (ErrorKind::BadDataChunk, 20));
        let e = fails(b"set k 0 0 2000\r\n");
        assert_eq!(
            (e.kind, e.consumed, e.swallow),
            (ErrorKind::TooLarge, 16, 2002)
        );
        assert_eq!(e.stale_key, Some((4, 1)));
        assert_eq!(fails(b"incr k x\r\n").kind, ErrorKind::BadDelta);
        assert_eq!(
            fails(b"incr k 18446744073709551616\r\n").kind,
            ErrorKind::BadDelta
        );
        assert_eq!(fails(b"delete k 5\r\n").kind, ErrorKind::BadDelete);
        let long_key = [b'a'; 251];
        let line = [&b"get "[..], &long_key, b"\r\n"].concat();
        assert_eq!(fails(&line).kind, ErrorKind::BadFormat);
        let e = fails(&vec![b'a'; MAX_LINE + 10]);
        assert!(e.close && e.kind == ErrorKind::LineTooLong);
        assert_eq!(fails(b"mg k Z\r\n").kind, ErrorKind::BadFlag);
        assert_eq!(fails(b"mg !!! b\r\n").kind, ErrorKind::BadKeyEncoding);
    }

    #[test]
    fn retrieval_and_others() {
        assert_eq!(
            one(b"gets a b\n"),
            Command::Get {
                keys: vec![b"a", b"b"],
                with_cas: true,
                touch: None
            }
        );
        assert_eq!(
            one(b"gat 10 a\r\n"),
            Command::Get {
                keys: vec![b"a"],
                with_cas: false,
                touch: Some(10)
            }
        );
        assert_eq!(
            one(b"delete k 0 noreply\r\n"),
            Command::Delete {
                key: b"k",
                noreply: true
            }
        );
        assert_eq!(
            one(b"flush_all 0\r\n"),
            Command::FlushAll {
                delay: 0,
                noreply: false
            }
        );
        assert_eq!(
            one(b"verbosity 1 noreply\r\n"),
            Command::Verbosity { noreply: true }
        );
        assert_eq!(fails(b"get\r\n").kind, ErrorKind::UnknownCommand);
    }

    #[test]
    fn meta_commands() {
        let Command::MetaGet { key, flags, .. } = one(b"mg Zm9v b v c Oabc k q\r\n") else {
            panic!()
        };
        assert_eq!(&*key, b"foo");
        assert!(flags.value && flags.quiet && flags.base64);
        assert_eq!(flags.ret, b"cOk");
        assert_eq!(flags.opaque, Some(&b"abc"[..]));
        let Command::MetaSet { data, flags, .. } = one(b"ms k 2 T30 F5 MA\r\nhi\r\n") else {
            panic!()
        };
        assert_eq!(
            (data, flags.ttl, flags.client_flags, flags.mode),
            (&b"hi"[..], Some(30), Some(5), Some(b'A'))
        );
        assert_eq!(parse(b"ms k 2\r\nh", &L), Ok(None));
        assert_eq!(one(b"mn\r\n"), Command::MetaNoop);
    }
}
