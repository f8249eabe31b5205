//! What can go wrong, as one type; each message says what to do. Every error maps to the MCAPI
//! status a C caller sees ([`McapiError::status`]).

use crate::ids::EndpointId;
use crate::status::Status;
use std::sync::Arc;

/// Why a peer node is unreachable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerLoss {
    /// Its process exited or was killed (its connection broke, or its pid is gone).
    Died,
    /// It called `mcapi_finalize`.
    Finalized,
    /// It sent bytes that break the protocol (a bug or an attack); the link was dropped.
    Protocol(String),
    /// TCP: it stopped answering for `tcp_dead_after` (a network partition or a dead host;
    /// which one cannot be told from here).
    Unreachable,
}

impl std::fmt::Display for PeerLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerLoss::Died => f.write_str("its process died"),
            PeerLoss::Finalized => f.write_str("it finalized"),
            PeerLoss::Protocol(d) => write!(f, "it broke the protocol ({d}); the link was dropped"),
            PeerLoss::Unreachable => {
                f.write_str("it stopped answering (network partition or host down)")
            }
        }
    }
}

#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McapiError {
    #[error("the MCAPI node is not initialized: call mcapi_initialize first")]
    NotInitialized,
    #[error("this process already runs MCAPI node {node}: call mcapi_finalize before initializing again")]
    AlreadyInitialized { node: u32 },
    #[error("node {node} is not in the topology ({nodes} nodes, ids 0..{nodes}): fix the node id or the topology")]
    NodeInvalid { node: u32, nodes: u32 },
    #[error("domain {domain} is not this topology's domain {expected}")]
    DomainInvalid { domain: u32, expected: u32 },
    #[error("node {node} could not start: {reason}")]
    InitFailed { node: u32, reason: String },
    #[error("port {port} is not a valid port (0..=65534, or MCAPI_PORT_ANY when creating)")]
    PortInvalid { port: u32 },
    #[error("{0} is not a valid endpoint (never created, deleted, or not an endpoint value)")]
    EndpointInvalid(EndpointId),
    #[error("the value {0:#x} is not an endpoint")]
    NotAnEndpoint(u32),
    #[error("endpoint {0} already exists: use another port or MCAPI_PORT_ANY")]
    EndpointExists(EndpointId),
    #[error("this node already has {max} endpoints: delete some first")]
    EndpointLimit { max: usize },
    #[error("no free port is left for MCAPI_PORT_ANY")]
    NoPorts,
    #[error("endpoint {0} belongs to another node: only its owner may do this")]
    EndpointRemote(EndpointId),
    #[error("endpoint {0} belongs to node {1}: only the node that created it may delete it")]
    EndpointNotOwner(EndpointId, u32),
    #[error("attribute {0} is not supported by kioku")]
    AttrNotSupported(u32),
    #[error("endpoint {0} has a connected channel: close both sides before deleting it")]
    EndpointConnected(EndpointId),
    #[error("attribute {0} does not exist")]
    AttrNum(u32),
    #[error("attribute {num}: size {size} is wrong, it takes {want} bytes")]
    AttrSize { num: u32, size: usize, want: usize },
    #[error("attribute {num} is read-only")]
    AttrReadOnly { num: u32 },
    #[error("attribute {num}: value {value} is out of range")]
    AttrValue { num: u32, value: u64 },
    #[error("a message of {size} bytes exceeds MCAPI_MAX_MSG_SIZE ({max})")]
    MsgLimit { size: usize, max: usize },
    #[error("a packet of {size} bytes exceeds MCAPI_MAX_PKT_SIZE ({max})")]
    PktLimit { size: usize, max: usize },
    #[error("the message has {size} bytes, more than the {capacity}-byte buffer; it was cut")]
    Truncated { size: usize, capacity: usize },
    #[error("priority {0} is out of range (0 highest ..= MCAPI_MIN_PRIORITY)")]
    Priority(u32),
    #[error("endpoint {0} is already connected to a channel")]
    ChanConnected(EndpointId),
    #[error("endpoint {0} is connected to a channel of the other kind (packet vs scalar)")]
    ChanType(EndpointId),
    #[error("endpoint {0} is connected in the other direction")]
    ChanDirection(EndpointId),
    #[error("the channel of endpoint {0} is already open")]
    ChanOpen(EndpointId),
    #[error("an open of endpoint {0} is already pending")]
    ChanOpenPending(EndpointId),
    #[error("the channel is not open (or its other side closed it)")]
    ChanNotOpen,
    #[error("the value {0:#x} is not an open channel handle of this kind")]
    ChanInvalid(u32),
    #[error("a scalar of {sent} bytes is next on the channel; it must be received with the same width (asked for {asked})")]
    SclSize { sent: u8, asked: u8 },
    #[error("node {node} is unreachable: {why}")]
    Transmission { node: u32, why: PeerLoss },
    #[error("endpoint {0} was deleted by its owner")]
    EndpointDeleted(EndpointId),
    #[error("that is not a packet buffer this node handed out (or it was released already)")]
    BufInvalid,
    #[error("out of memory: {0}")]
    MemLimit(&'static str),
    #[error("not a valid request (never issued, or already completed and reported)")]
    RequestInvalid,
    #[error("too many requests outstanding ({max}): wait for some first")]
    RequestLimit { max: usize },
    #[error("the request was cancelled")]
    Cancelled,
    #[error("the operation timed out")]
    Timeout,
    #[error("invalid parameter: {0}")]
    Parameter(&'static str),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: Arc<std::io::Error>,
    },
}

impl McapiError {
    /// The MCAPI status a C caller sees for this error.
    pub fn status(&self) -> Status {
        use McapiError as E;
        match self {
            E::NotInitialized => Status::ErrNodeNotInit,
            E::AlreadyInitialized { .. } => Status::ErrNodeInitialized,
            E::NodeInvalid { .. } => Status::ErrNodeInvalid,
            E::DomainInvalid { .. } => Status::ErrDomainInvalid,
            E::InitFailed { .. } => Status::ErrNodeInitFailed,
            E::PortInvalid { .. } => Status::ErrPortInvalid,
            E::EndpointInvalid(_) | E::NotAnEndpoint(_) => Status::ErrEndpInvalid,
            E::EndpointExists(_) => Status::ErrEndpExists,
            E::EndpointLimit { .. } => Status::ErrEndpLimit,
            E::NoPorts => Status::ErrEndpNoPorts,
            E::EndpointRemote(_) => Status::ErrEndpRemote,
            E::EndpointConnected(_) => Status::ErrChanOpen,
            E::EndpointNotOwner(..) => Status::ErrEndpNotOwner,
            E::AttrNotSupported(_) => Status::ErrAttrNotSupported,
            E::AttrNum(_) => Status::ErrAttrNum,
            E::AttrSize { .. } => Status::ErrAttrSize,
            E::AttrReadOnly { .. } => Status::ErrAttrReadOnly,
            E::AttrValue { .. } => Status::ErrAttrValue,
            E::MsgLimit { .. } => Status::ErrMsgLimit,
            E::PktLimit { .. } => Status::ErrPktLimit,
            E::Truncated { .. } => Status::ErrMsgTruncated,
            E::Priority(_) => Status::ErrPriority,
            E::ChanConnected(_) => Status::ErrChanConnected,
            E::ChanType(_) => Status::ErrChanType,
            E::ChanDirection(_) => Status::ErrChanDirection,
            E::ChanOpen(_) => Status::ErrChanOpen,
            E::ChanOpenPending(_) => Status::ErrChanOpenPending,
            E::ChanNotOpen => Status::ErrChanNotOpen,
            E::ChanInvalid(_) => Status::ErrChanInvalid,
            E::SclSize { .. } => Status::ErrSclSize,
            E::Transmission { .. } => Status::ErrTransmission,
            E::EndpointDeleted(_) => Status::ErrEndpDeleted,
            E::BufInvalid => Status::ErrBufInvalid,
            E::MemLimit(_) => Status::ErrMemLimit,
            E::RequestInvalid => Status::ErrRequestInvalid,
            E::RequestLimit { .. } => Status::ErrRequestLimit,
            E::Cancelled => Status::ErrRequestCancelled,
            E::Timeout => Status::Timeout,
            E::Parameter(_) => Status::ErrParameter,
            E::Io { .. } => Status::ErrGeneral,
        }
    }

    pub(crate) fn io(what: &'static str, source: std::io::Error) -> McapiError {
        McapiError::Io {
            what,
            source: Arc::new(source),
        }
    }
}

pub type Result<T> = std::result::Result<T, McapiError>;
