//! The frames nodes exchange once a link is up, the same on both transports. A frame is a
//! 24-byte little-endian header and `len` payload bytes. Decoding checks the type, that
//! control frames carry no payload, the scalar width, and the length against the largest
//! message or packet: anything else is a protocol error and drops the link.

pub const HEADER_LEN: usize = 24;

/// Largest message and packet payload (MCAPI_MAX_MSG_SIZE, MCAPI_MAX_PKT_SIZE).
pub const MAX_PAYLOAD: usize = 1 << 20;

/// Most slices a vectored send gathers into one message or packet.
pub const MAX_SLICES: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A message: src port, dst port, priority in `flags`.
    Msg = 1,
    /// A packet on a channel: src port (send endpoint), dst port (receive endpoint).
    Pkt = 2,
    /// A scalar: width in `flags`, value in `b`.
    Scl = 3,
    /// The sender consumed `a` entries and `b` bytes that the receiver sent to its port `src`.
    Credit = 4,
    /// Does port `dst` exist? Reply with token `b` once it does.
    Get = 5,
    /// Reply to `Get` with token `b`; status in `aux` (Success or an error code).
    GetReply = 6,
    /// Traffic for port `dst` from port `src` found no endpoint.
    NoEndpoint = 7,
    /// Reserve endpoint `dst` for a channel with peer endpoint `a` (raw); `flags` = kind|dir;
    /// token `b`.
    Connect = 8,
    /// Reply to `Connect`, token `b`, status in `aux`.
    ConnectReply = 9,
    /// Undo a reservation of `dst` for peer `a` (a connect whose other side failed).
    Disconnect = 10,
    /// The channel side at `src` opened; `dst` is the other side.
    Opened = 11,
    /// The channel side at `src` closed; `dst` is the other side.
    Closed = 12,
    /// The sending node finalizes: nothing more will come.
    Bye = 13,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        use Kind::*;
        Some(match v {
            1 => Msg,
            2 => Pkt,
            3 => Scl,
            4 => Credit,
            5 => Get,
            6 => GetReply,
            7 => NoEndpoint,
            8 => Connect,
            9 => ConnectReply,
            10 => Disconnect,
            11 => Opened,
            12 => Closed,
            13 => Bye,
            _ => return None,
        })
    }

    fn has_payload(self) -> bool {
        matches!(self, Kind::Msg | Kind::Pkt)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub src: u16,
    pub dst: u16,
    pub aux: u16,
    pub len: u32,
    pub a: u32,
    pub b: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("unknown frame type {0}")]
    Type(u8),
    #[error("a {kind:?} frame carries {len} payload bytes")]
    Length { kind: Kind, len: u32 },
    #[error("scalar width {0} is not 1, 2, 4 or 8")]
    Width(u8),
    #[error("message priority {0} is out of range")]
    Priority(u8),
}

/// Lowest priority (MCAPI_MIN_PRIORITY); 0 is the highest.
pub const MIN_PRIORITY: u8 = 7;

impl Header {
    pub fn control(kind: Kind, src: u16, dst: u16) -> Header {
        Header {
            kind,
            flags: 0,
            src,
            dst,
            aux: 0,
            len: 0,
            a: 0,
            b: 0,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = self.kind as u8;
        h[1] = self.flags;
        h[2..4].copy_from_slice(&self.src.to_le_bytes());
        h[4..6].copy_from_slice(&self.dst.to_le_bytes());
        h[6..8].copy_from_slice(&self.aux.to_le_bytes());
        h[8..12].copy_from_slice(&self.len.to_le_bytes());
        h[12..16].copy_from_slice(&self.a.to_le_bytes());
        h[16..24].copy_from_slice(&self.b.to_le_bytes());
        h
    }

    pub fn decode(h: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
        let kind = Kind::from_u8(h[0]).ok_or(FrameError::Type(h[0]))?;
        let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        let hdr = Header {
            kind,
            flags: h[1],
            src: u16_at(2),
            dst: u16_at(4),
            aux: u16_at(6),
            len,
            a: u32::from_le_bytes([h[12], h[13], h[14], h[15]]),
            b: u64::from_le_bytes(h[16..24].try_into().expect("8 bytes")),
        };
        if (!kind.has_payload() && len != 0) || len as usize > MAX_PAYLOAD {
            return Err(FrameError::Length { kind, len });
        }
        match kind {
            Kind::Scl if !matches!(hdr.flags, 1 | 2 | 4 | 8) => Err(FrameError::Width(hdr.flags)),
            Kind::Msg if hdr.flags > MIN_PRIORITY => Err(FrameError::Priority(hdr.flags)),
            _ => Ok(hdr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_bad_headers() {
        let h = Header {
            kind: Kind::Msg,
            flags: 3,
            src: 1,
            dst: 65534,
            aux: 9,
            len: 24,
            a: 7,
            b: u64::MAX,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let mut raw = h.encode();
        raw[0] = 99;
        assert_eq!(Header::decode(&raw), Err(FrameError::Type(99)));
        let mut big = h;
        big.len = MAX_PAYLOAD as u32 + 1;
        assert!(matches!(
            Header::decode(&big.encode()),
            Err(FrameError::Length { .. })
        ));
        let mut ctl = Header::control(Kind::Credit, 1, 2);
        ctl.len = 1;
        assert!(matches!(
            Header::decode(&ctl.encode()),
            Err(FrameError::Length { .. })
        ));
        let mut scl = Header::control(Kind::Scl, 1, 2);
        scl.flags = 3;
        assert_eq!(Header::decode(&scl.encode()), Err(FrameError::Width(3)));
        let mut prio = h;
        prio.flags = 8;
        assert_eq!(Header::decode(&prio.encode()), Err(FrameError::Priority(8)));
    }
}
