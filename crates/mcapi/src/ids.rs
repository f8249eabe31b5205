//! Identifiers as the C API carries them: endpoints, channel handles and requests are scalars
//! with a tag in their top bits, so a value of the wrong kind (or 0, MCAPI_NULL) is refused
//! instead of being taken for something else.

/// Largest node id (12 bits of an endpoint value).
pub const MAX_NODE: u32 = 0x0FFF;
/// Largest port (16 bits of an endpoint value); MCAPI_PORT_ANY is `u32::MAX`.
pub const MAX_PORT: u32 = 0xFFFE;
/// `MCAPI_PORT_ANY`.
pub const PORT_ANY: u32 = u32::MAX;

const EP_TAG: u32 = 0xB;

/// A global endpoint name `<node, port>` (the domain is the topology's one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId {
    pub node: u16,
    pub port: u16,
}

impl EndpointId {
    pub fn new(node: u32, port: u32) -> EndpointId {
        debug_assert!(node <= MAX_NODE && port <= MAX_PORT);
        EndpointId {
            node: node as u16,
            port: port as u16,
        }
    }

    /// The `mcapi_endpoint_t` value.
    pub fn to_raw(self) -> u32 {
        (EP_TAG << 28) | (u32::from(self.node) << 16) | u32::from(self.port)
    }

    /// The endpoint a `mcapi_endpoint_t` value names, if it is one.
    pub fn from_raw(raw: u32) -> Option<EndpointId> {
        if raw >> 28 != EP_TAG || raw & 0xFFFF > MAX_PORT {
            return None;
        }
        Some(EndpointId {
            node: ((raw >> 16) & 0x0FFF) as u16,
            port: (raw & 0xFFFF) as u16,
        })
    }
}

impl std::fmt::Display for EndpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<node {}, port {}>", self.node, self.port)
    }
}

/// Packet or scalar channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChanKind {
    Packet,
    Scalar,
}

/// Which side of a channel an endpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Send,
    Receive,
}

/// A local, typed handle of an open channel side (`mcapi_pktchan_send_hndl_t` …). The
/// generation changes each time the endpoint's channel is opened, so a handle kept after a
/// close is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelHandle {
    pub kind: ChanKind,
    pub dir: Direction,
    pub port: u16,
    pub generation: u16,
}

impl ChannelHandle {
    fn tag(kind: ChanKind, dir: Direction) -> u32 {
        match (kind, dir) {
            (ChanKind::Packet, Direction::Send) => 0x1,
            (ChanKind::Packet, Direction::Receive) => 0x2,
            (ChanKind::Scalar, Direction::Send) => 0x3,
            (ChanKind::Scalar, Direction::Receive) => 0x4,
        }
    }

    pub fn to_raw(self) -> u32 {
        (Self::tag(self.kind, self.dir) << 28)
            | (u32::from(self.generation & 0x0FFF) << 16)
            | u32::from(self.port)
    }

    /// The handle a raw value names, if it has the expected kind and direction.
    pub fn from_raw(raw: u32, kind: ChanKind, dir: Direction) -> Option<ChannelHandle> {
        if raw >> 28 != Self::tag(kind, dir) {
            return None;
        }
        Some(ChannelHandle {
            kind,
            dir,
            port: (raw & 0xFFFF) as u16,
            generation: ((raw >> 16) & 0x0FFF) as u16,
        })
    }
}

/// A request of a non-blocking call (`mcapi_request_t`): a slot and its generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

const REQ_TAG: u64 = 0x7E;

impl RequestId {
    pub fn to_raw(self) -> u64 {
        (REQ_TAG << 56) | (u64::from(self.generation & 0x00FF_FFFF) << 32) | u64::from(self.slot)
    }

    pub fn from_raw(raw: u64) -> Option<RequestId> {
        if raw >> 56 != REQ_TAG {
            return None;
        }
        Some(RequestId {
            slot: raw as u32,
            generation: ((raw >> 32) & 0x00FF_FFFF) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_kinds_do_not_mix() {
        let e = EndpointId::new(4095, 65534);
        assert_eq!(EndpointId::from_raw(e.to_raw()), Some(e));
        assert_eq!(EndpointId::from_raw(0), None);
        let h = ChannelHandle {
            kind: ChanKind::Packet,
            dir: Direction::Send,
            port: 7,
            generation: 3,
        };
        let raw = h.to_raw();
        assert_eq!(
            ChannelHandle::from_raw(raw, ChanKind::Packet, Direction::Send),
            Some(h)
        );
        assert_eq!(
            ChannelHandle::from_raw(raw, ChanKind::Scalar, Direction::Send),
            None
        );
        assert_eq!(
            ChannelHandle::from_raw(raw, ChanKind::Packet, Direction::Receive),
            None
        );
        assert_eq!(EndpointId::from_raw(raw), None);
        let r = RequestId {
            slot: 9,
            generation: 77,
        };
        assert_eq!(RequestId::from_raw(r.to_raw()), Some(r));
        assert_eq!(RequestId::from_raw(0), None);
    }
}
