//! The C API of `include/kioku_mcapi.h`: the MCAPI 2.0 functions with the standard's names,
//! types and status codes, over one node per process. Rules kept by every function: no panic
//! crosses into C (a panic becomes `MCAPI_ERR_GENERAL`); every pointer is checked; a NULL
//! status pointer is tolerated; a failure records a one-line text for
//! `kioku_mcapi_last_error`. Out-parameters of non-blocking calls (the receive buffer, the
//! endpoint of a get, the handle of an open, the packet buffer) are written when
//! `mcapi_test`/`mcapi_wait`/`mcapi_wait_any` report the request complete.

use crate::error::{McapiError, PeerLoss};
use crate::ids::{ChanKind, ChannelHandle, Direction, EndpointId, RequestId};
use crate::node::{Node, PeerState};
use crate::status::Status;
use crate::topology::Topology;
use crate::Completion;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

pub type McapiStatus = u32;
pub type McapiBoolean = u8;
pub type McapiEndpoint = u32;
pub type McapiHandle = u32;
pub type McapiRequest = u64;

/// `mcapi_param_t`: implementation-specific initialization parameters.
#[repr(C)]
pub struct McapiParam {
    /// Path of a topology file (NULL: `KIOKU_MCAPI_TOPOLOGY` and `KIOKU_MCAPI_*` only).
    pub topology: *const c_char,
}

/// `mcapi_node_attributes_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct McapiNodeAttributes {
    pub node_type: u32,
    pub reserved: [u32; 7],
}

/// `mcapi_info_t`.
#[repr(C)]
pub struct McapiInfo {
    pub mcapi_version: u32,
    pub organization_id: u32,
    pub implementation_version: u32,
    pub number_of_domains: u32,
    pub number_of_nodes: u32,
    pub number_of_ports: u32,
}

pub const MCAPI_VERSION: u32 = 2015;
pub const KIOKU_MCAPI_IMPL_VERSION: u32 = 1000;
/// kioku's organization id in `mcapi_info_t` (none is assigned by the MCA).
pub const KIOKU_MCAPI_ORG_ID: u32 = 0x6b696f;
pub const MCAPI_TIMEOUT_INFINITE: u32 = u32::MAX;
pub const MCAPI_NODE_ATTR_TYPE: u32 = 0;
pub const MCAPI_NODE_ATTR_TYPE_REGULAR: u32 = 0;
/// kioku's node attribute: what this node knows of another (`KIOKU_MCAPI_NODE_*`).
pub const KIOKU_MCAPI_NODE_ATTR_STATE: u32 = 64;
pub const KIOKU_MCAPI_NODE_UNKNOWN: u32 = 0;
pub const KIOKU_MCAPI_NODE_CONNECTING: u32 = 1;
pub const KIOKU_MCAPI_NODE_UP: u32 = 2;
pub const KIOKU_MCAPI_NODE_DIED: u32 = 3;
pub const KIOKU_MCAPI_NODE_FINALIZED: u32 = 4;
pub const KIOKU_MCAPI_NODE_PROTOCOL: u32 = 5;
pub const KIOKU_MCAPI_NODE_UNREACHABLE: u32 = 6;
pub const MCAPI_ENDP_ATTR_TYPE: u32 = 0;
pub const MCAPI_ENDP_ATTR_GET_COUNT: u32 = 1;
pub const MCAPI_ENDP_ATTR_GET_SOURCE: u32 = 2;
pub const MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE: u32 = 3;
pub const MCAPI_ENDP_ATTR_BUFFER_TYPE: u32 = 4;
pub const MCAPI_ENDP_ATTR_MEMORY_TYPE: u32 = 5;
pub const MCAPI_ENDP_ATTR_NUM_PRIORITIES: u32 = 6;
pub const MCAPI_ENDP_ATTR_PRIORITY: u32 = 7;
pub const MCAPI_ENDP_ATTR_NUM_SEND_BUFFERS: u32 = 8;
pub const MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS: u32 = 9;
pub const MCAPI_ENDP_ATTR_ENDP_STATUS: u32 = 10;
pub const MCAPI_ENDP_ATTR_TIMEOUT: u32 = 11;
pub const MCAPI_ENDP_ATTR_END: u32 = 12;
pub const MCAPI_MAX_STATUS_SIZE: usize = 32;

static NODE: RwLock<Option<Node>> = RwLock::new(None);

/// Where a pending request's results go in the caller's memory.
#[derive(Clone, Copy)]
enum Out {
    None,
    Msg { buf: usize, cap: usize },
    Pkt { out: usize },
    Endpoint { out: usize },
    Handle { out: usize },
}

struct Tables {
    outs: HashMap<u64, Out>,
    packets: HashMap<usize, Box<[u8]>>,
}

static TABLES: Mutex<Option<Tables>> = Mutex::new(None);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn tables<T>(f: impl FnOnce(&mut Tables) -> T) -> T {
    let mut g = TABLES.lock().unwrap_or_else(|p| p.into_inner());
    let t = g.get_or_insert_with(|| Tables {
        outs: HashMap::new(),
        packets: HashMap::new(),
    });
    f(t)
}

fn node() -> Result<Node, McapiError> {
    NODE.read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .ok_or(McapiError::NotInitialized)
}

fn put_status(status: *mut McapiStatus, s: Status) {
    if !status.is_null() {
        // SAFETY: a non-NULL status pointer is valid for a write, per the standard.
        unsafe { *status = s.code() };
    }
}

/// Runs `f`, reporting its status; a panic is `MCAPI_ERR_GENERAL`.
fn call<T: Default>(
    status: *mut McapiStatus,
    f: impl FnOnce() -> Result<(T, Status), McapiError>,
) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok((v, s))) => {
            put_status(status, s);
            v
        }
        Ok(Err(e)) => {
            set_error(&e.to_string());
            put_status(status, e.status());
            T::default()
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            set_error(&format!("internal error (a bug in kioku): {msg}"));
            put_status(status, Status::ErrGeneral);
            T::default()
        }
    }
}

fn ok<T>(v: T) -> Result<(T, Status), McapiError> {
    Ok((v, Status::Success))
}

fn timeout_of(ms: u32) -> Option<Duration> {
    (ms != MCAPI_TIMEOUT_INFINITE).then(|| Duration::from_millis(u64::from(ms)))
}

fn endpoint(raw: McapiEndpoint) -> Result<EndpointId, McapiError> {
    EndpointId::from_raw(raw).ok_or(McapiError::NotAnEndpoint(raw))
}

fn handle(raw: McapiHandle, kind: ChanKind, dir: Direction) -> Result<ChannelHandle, McapiError> {
    ChannelHandle::from_raw(raw, kind, dir).ok_or(McapiError::ChanInvalid(raw))
}

/// Issues a request: writes its handle, remembers where its results go, and reports
/// `MCAPI_SUCCESS` if it already completed or `MCAPI_PENDING` (either way `mcapi_test`,
/// `mcapi_wait` or `mcapi_wait_any` then reports it and frees it).
fn issue_checked(
    n: &Node,
    request: *mut McapiRequest,
    r: RequestId,
    out: Out,
) -> Result<((), Status), McapiError> {
    // SAFETY: the caller checked `request` for NULL; it is valid for a write.
    unsafe { *request = r.to_raw() };
    tables(|t| t.outs.insert(r.to_raw(), out));
    let pending = n.is_pending(r)?;
    Ok((
        (),
        if pending {
            Status::Pending
        } else {
            Status::Success
        },
    ))
}

/// Applies a completed request's results to the caller's memory; returns (size, status).
fn apply(raw: u64, c: Completion) -> Result<(usize, Status), McapiError> {
    let out = tables(|t| t.outs.remove(&raw)).unwrap_or(Out::None);
    match out {
        Out::None => Ok((c.size, Status::Success)),
        Out::Msg { buf, cap } => {
            let data = c.data.unwrap_or_default();
            let n = data.len().min(cap);
            if n > 0 {
                // SAFETY: the caller gave `buf` valid for `cap` bytes until the receive
                // completes; n <= cap.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, n) };
            }
            if data.len() > cap {
                set_error(
                    &McapiError::Truncated {
                        size: data.len(),
                        capacity: cap,
                    }
                    .to_string(),
                );
                Ok((n, Status::ErrMsgTruncated))
            } else {
                Ok((n, Status::Success))
            }
        }
        Out::Pkt { out } => {
            let data = c.data.unwrap_or_default();
            let size = data.len();
            let max = node()
                .map(|n| n.topology().max_packet_buffers)
                .unwrap_or(1024);
            let mut buf: Box<[u8]> = if data.is_empty() {
                vec![0u8; 1].into_boxed_slice()
            } else {
                data.into_boxed_slice()
            };
            let ptr = buf.as_mut_ptr() as usize;
            let full = tables(|t| {
                if t.packets.len() >= max {
                    return true;
                }
                t.packets.insert(ptr, buf);
                false
            });
            if full {
                return Err(McapiError::MemLimit(
                    "too many packet buffers unreleased: call mcapi_pktchan_release",
                ));
            }
            // SAFETY: `out` is the caller's `void **buffer`, valid for a write.
            unsafe { *(out as *mut *mut c_void) = ptr as *mut c_void };
            Ok((size, Status::Success))
        }
        Out::Endpoint { out } => {
            // SAFETY: the caller's `mcapi_endpoint_t *`, valid for a write.
            unsafe { *(out as *mut McapiEndpoint) = c.endpoint.map(|e| e.to_raw()).unwrap_or(0) };
            Ok((0, Status::Success))
        }
        Out::Handle { out } => {
            // SAFETY: the caller's handle pointer, valid for a write.
            unsafe { *(out as *mut McapiHandle) = c.handle.map(|h| h.to_raw()).unwrap_or(0) };
            Ok((0, Status::Success))
        }
    }
}

fn forget(raw: u64) {
    tables(|t| t.outs.remove(&raw));
}

fn request_of(request: *mut McapiRequest) -> Result<(u64, RequestId), McapiError> {
    if request.is_null() {
        return Err(McapiError::Parameter("request is NULL"));
    }
    // SAFETY: non-NULL request pointer, valid for a read.
    let raw = unsafe { *request };
    Ok((
        raw,
        RequestId::from_raw(raw).ok_or(McapiError::RequestInvalid)?,
    ))
}

fn need(p: *const c_void, what: &'static str) -> Result<(), McapiError> {
    if p.is_null() {
        Err(McapiError::Parameter(what))
    } else {
        Ok(())
    }
}

// ------------------------------------------------------------------- node

/// `mcapi_initialize` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// Pointers as kioku_mcapi.h says: NULL where allowed, else valid for the access.
#[no_mangle]
pub unsafe extern "C" fn mcapi_initialize(
    domain_id: u32,
    node_id: u32,
    mcapi_node_attributes: *const McapiNodeAttributes,
    init_parameters: *const McapiParam,
    mcapi_info: *mut McapiInfo,
    mcapi_status: *mut McapiStatus,
) {
    crate::init_logging();
    call(mcapi_status, || {
        let _ = mcapi_node_attributes;
        let mut slot = NODE.write().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = slot.as_ref() {
            return Err(McapiError::AlreadyInitialized { node: n.id() });
        }
        let path = if init_parameters.is_null() {
            None
        } else {
            // SAFETY: non-NULL parameters per the header.
            let p = unsafe { &*init_parameters };
            if p.topology.is_null() {
                None
            } else {
                // SAFETY: a NUL-terminated path per the header.
                let s = unsafe { CStr::from_ptr(p.topology) };
                Some(std::path::PathBuf::from(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(s.to_bytes()),
                ))
            }
        };
        let topo = Topology::load(path.as_deref()).map_err(|e| McapiError::InitFailed {
            node: node_id,
            reason: format!("topology: {e}"),
        })?;
        let n = Node::initialize(domain_id, node_id, topo)?;
        if !mcapi_info.is_null() {
            // SAFETY: non-NULL info, valid for a write.
            unsafe {
                *mcapi_info = McapiInfo {
                    mcapi_version: MCAPI_VERSION,
                    organization_id: KIOKU_MCAPI_ORG_ID,
                    implementation_version: KIOKU_MCAPI_IMPL_VERSION,
                    number_of_domains: 1,
                    number_of_nodes: n.topology().nodes,
                    number_of_ports: crate::ids::MAX_PORT + 1,
                }
            };
        }
        *slot = Some(n);
        ok(())
    })
}

/// `mcapi_finalize` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_finalize(mcapi_status: *mut McapiStatus) {
    call(mcapi_status, || {
        let n = NODE
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or(McapiError::NotInitialized)?;
        n.finalize(Duration::from_secs(5))?;
        tables(|t| {
            t.outs.clear();
            t.packets.clear();
        });
        ok(())
    })
}

/// `mcapi_domain_id_get` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_domain_id_get(mcapi_status: *mut McapiStatus) -> u32 {
    let mut v = u32::MAX;
    call(mcapi_status, || {
        v = node()?.domain();
        ok(())
    });
    v
}

/// `mcapi_node_id_get` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_node_id_get(mcapi_status: *mut McapiStatus) -> u32 {
    let mut v = u32::MAX;
    call(mcapi_status, || {
        v = node()?.id();
        ok(())
    });
    v
}

/// `mcapi_node_init_attributes` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// Pointers NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_node_init_attributes(
    mcapi_node_attributes: *mut McapiNodeAttributes,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        need(mcapi_node_attributes.cast(), "attributes is NULL")?;
        // SAFETY: checked non-NULL; valid for a write per the header.
        unsafe {
            *mcapi_node_attributes = McapiNodeAttributes {
                node_type: MCAPI_NODE_ATTR_TYPE_REGULAR,
                reserved: [0; 7],
            }
        };
        ok(())
    })
}

/// `mcapi_node_set_attribute` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// Pointers NULL or valid for `attribute_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_node_set_attribute(
    mcapi_node_attributes: *mut McapiNodeAttributes,
    attribute_num: u32,
    attribute: *const c_void,
    attribute_size: usize,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        need(mcapi_node_attributes.cast(), "attributes is NULL")?;
        need(attribute, "attribute is NULL")?;
        match attribute_num {
            MCAPI_NODE_ATTR_TYPE => {
                if attribute_size != 4 {
                    return Err(McapiError::AttrSize {
                        num: attribute_num,
                        size: attribute_size,
                        want: 4,
                    });
                }
                // SAFETY: attribute holds 4 bytes per the size check.
                let v = unsafe { std::ptr::read_unaligned(attribute.cast::<u32>()) };
                if v != MCAPI_NODE_ATTR_TYPE_REGULAR {
                    return Err(McapiError::AttrValue {
                        num: attribute_num,
                        value: u64::from(v),
                    });
                }
                // SAFETY: checked non-NULL.
                unsafe { (*mcapi_node_attributes).node_type = v };
                ok(())
            }
            KIOKU_MCAPI_NODE_ATTR_STATE => Err(McapiError::AttrReadOnly { num: attribute_num }),
            _ => Err(McapiError::AttrNum(attribute_num)),
        }
    })
}

/// `mcapi_node_get_attribute` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// Pointers NULL or valid for `attribute_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_node_get_attribute(
    domain_id: u32,
    node_id: u32,
    attribute_num: u32,
    attribute: *mut c_void,
    attribute_size: usize,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(attribute, "attribute is NULL")?;
        if domain_id != n.domain() {
            return Err(McapiError::DomainInvalid {
                domain: domain_id,
                expected: n.domain(),
            });
        }
        if attribute_size != 4 {
            return Err(McapiError::AttrSize {
                num: attribute_num,
                size: attribute_size,
                want: 4,
            });
        }
        let v = match attribute_num {
            MCAPI_NODE_ATTR_TYPE => {
                if node_id >= n.topology().nodes {
                    return Err(McapiError::NodeInvalid {
                        node: node_id,
                        nodes: n.topology().nodes,
                    });
                }
                MCAPI_NODE_ATTR_TYPE_REGULAR
            }
            KIOKU_MCAPI_NODE_ATTR_STATE => {
                if node_id == n.id() {
                    KIOKU_MCAPI_NODE_UP
                } else {
                    match n.peer_state(node_id)? {
                        PeerState::Unknown => KIOKU_MCAPI_NODE_UNKNOWN,
                        PeerState::Connecting => KIOKU_MCAPI_NODE_CONNECTING,
                        PeerState::Up => KIOKU_MCAPI_NODE_UP,
                        PeerState::Lost(PeerLoss::Died) => KIOKU_MCAPI_NODE_DIED,
                        PeerState::Lost(PeerLoss::Finalized) => KIOKU_MCAPI_NODE_FINALIZED,
                        PeerState::Lost(PeerLoss::Protocol(_)) => KIOKU_MCAPI_NODE_PROTOCOL,
                        PeerState::Lost(PeerLoss::Unreachable) => KIOKU_MCAPI_NODE_UNREACHABLE,
                    }
                }
            }
            _ => return Err(McapiError::AttrNum(attribute_num)),
        };
        // SAFETY: attribute is valid for 4 bytes (size checked).
        unsafe { std::ptr::write_unaligned(attribute.cast::<u32>(), v) };
        ok(())
    })
}

// ------------------------------------------------------------------- endpoints

/// `mcapi_endpoint_create` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_create(
    port_id: u32,
    mcapi_status: *mut McapiStatus,
) -> McapiEndpoint {
    call(mcapi_status, || {
        ok(node()?.endpoint_create(port_id)?.to_raw())
    })
}

/// `mcapi_endpoint_get_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// Pointers NULL or valid; `endpoint` stays valid until the request completes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_get_i(
    domain_id: u32,
    node_id: u32,
    port_id: u32,
    endpoint: *mut McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(endpoint.cast(), "endpoint is NULL")?;
        need(request.cast(), "request is NULL")?;
        let r = n.endpoint_get_i(domain_id, node_id, port_id)?;
        issue_checked(
            &n,
            request,
            r,
            Out::Endpoint {
                out: endpoint as usize,
            },
        )
    })
}

/// `mcapi_endpoint_get` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_get(
    domain_id: u32,
    node_id: u32,
    port_id: u32,
    timeout: u32,
    mcapi_status: *mut McapiStatus,
) -> McapiEndpoint {
    call(mcapi_status, || {
        ok(node()?
            .endpoint_get(domain_id, node_id, port_id, timeout_of(timeout))?
            .to_raw())
    })
}

/// `mcapi_endpoint_release` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_release(
    endpoint: McapiEndpoint,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        let ep = endpoint_of(endpoint)?;
        if ep.node as u32 >= n.topology().nodes {
            return Err(McapiError::EndpointInvalid(ep));
        }
        ok(())
    })
}

fn endpoint_of(raw: McapiEndpoint) -> Result<EndpointId, McapiError> {
    endpoint(raw)
}

/// `mcapi_endpoint_delete` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_delete(
    endpoint: McapiEndpoint,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        let ep = endpoint_of(endpoint)?;
        match n.endpoint_delete(ep) {
            Err(McapiError::EndpointRemote(ep)) => {
                Err(McapiError::EndpointNotOwner(ep, u32::from(ep.node)))
            }
            r => r.map(|_| ((), Status::Success)),
        }
    })
}

/// `mcapi_endpoint_get_attribute` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `attribute` NULL or valid for `attribute_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_get_attribute(
    endpoint: McapiEndpoint,
    attribute_num: u32,
    attribute: *mut c_void,
    attribute_size: usize,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        let ep = endpoint_of(endpoint)?;
        need(attribute, "attribute is NULL")?;
        let (ty, st, getters, queued) = n.endpoint_facts(ep)?;
        let depth = n.topology().queue_depth;
        let v: u32 = match attribute_num {
            MCAPI_ENDP_ATTR_TYPE => ty,
            MCAPI_ENDP_ATTR_GET_COUNT => getters,
            MCAPI_ENDP_ATTR_MAX_PAYLOAD_SIZE => crate::MAX_PAYLOAD as u32,
            MCAPI_ENDP_ATTR_BUFFER_TYPE => 0,
            MCAPI_ENDP_ATTR_MEMORY_TYPE => 0,
            MCAPI_ENDP_ATTR_NUM_PRIORITIES => u32::from(crate::MIN_PRIORITY) + 1,
            MCAPI_ENDP_ATTR_PRIORITY => 0,
            MCAPI_ENDP_ATTR_NUM_SEND_BUFFERS => depth,
            MCAPI_ENDP_ATTR_NUM_RECV_BUFFERS => depth.saturating_sub(queued as u32),
            MCAPI_ENDP_ATTR_ENDP_STATUS => st,
            MCAPI_ENDP_ATTR_TIMEOUT => n
                .endpoint_timeout(ep)?
                .map(|d| d.as_millis().min(u128::from(u32::MAX - 1)) as u32)
                .unwrap_or(MCAPI_TIMEOUT_INFINITE),
            MCAPI_ENDP_ATTR_GET_SOURCE => return Err(unsupported(attribute_num)),
            _ => return Err(McapiError::AttrNum(attribute_num)),
        };
        if attribute_size != 4 {
            return Err(McapiError::AttrSize {
                num: attribute_num,
                size: attribute_size,
                want: 4,
            });
        }
        // SAFETY: attribute valid for 4 bytes (size checked).
        unsafe { std::ptr::write_unaligned(attribute.cast::<u32>(), v) };
        ok(())
    })
}

fn unsupported(num: u32) -> McapiError {
    McapiError::AttrNotSupported(num)
}

/// `mcapi_endpoint_set_attribute` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `attribute` NULL or valid for `attribute_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_endpoint_set_attribute(
    endpoint: McapiEndpoint,
    attribute_num: u32,
    attribute: *const c_void,
    attribute_size: usize,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        let ep = endpoint_of(endpoint)?;
        need(attribute, "attribute is NULL")?;
        n.endpoint_facts(ep)?;
        match attribute_num {
            MCAPI_ENDP_ATTR_TIMEOUT => {
                if attribute_size != 4 {
                    return Err(McapiError::AttrSize {
                        num: attribute_num,
                        size: attribute_size,
                        want: 4,
                    });
                }
                // SAFETY: 4 readable bytes (size checked).
                let ms = unsafe { std::ptr::read_unaligned(attribute.cast::<u32>()) };
                n.set_endpoint_timeout(ep, timeout_of(ms))?;
                ok(())
            }
            MCAPI_ENDP_ATTR_GET_SOURCE => Err(unsupported(attribute_num)),
            a if a < MCAPI_ENDP_ATTR_END => Err(McapiError::AttrReadOnly { num: a }),
            a => Err(McapiError::AttrNum(a)),
        }
    })
}

// ------------------------------------------------------------------- messages

/// `mcapi_msg_send_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` valid for `buffer_size` bytes; `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_send_i(
    send_endpoint: McapiEndpoint,
    receive_endpoint: McapiEndpoint,
    buffer: *const c_void,
    buffer_size: usize,
    priority: u32,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(request.cast(), "request is NULL")?;
        let data = bytes(buffer, buffer_size)?;
        let r = n.msg_send_i(
            endpoint_of(send_endpoint)?,
            endpoint_of(receive_endpoint)?,
            data,
            priority,
        )?;
        issue_checked(&n, request, r, Out::None)
    })
}

fn bytes<'a>(buffer: *const c_void, size: usize) -> Result<&'a [u8], McapiError> {
    if size == 0 {
        return Ok(&[]);
    }
    if buffer.is_null() {
        return Err(McapiError::Parameter("buffer is NULL"));
    }
    // SAFETY: the caller's buffer is valid for `size` bytes for the call.
    Ok(unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), size) })
}

/// `mcapi_msg_send` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` valid for `buffer_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_send(
    send_endpoint: McapiEndpoint,
    receive_endpoint: McapiEndpoint,
    buffer: *const c_void,
    buffer_size: usize,
    priority: u32,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let data = bytes(buffer, buffer_size)?;
        node()?.msg_send(
            endpoint_of(send_endpoint)?,
            endpoint_of(receive_endpoint)?,
            data,
            priority,
        )?;
        ok(())
    })
}

/// `mcapi_msg_recv_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` valid for `buffer_size` bytes until the request completes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_recv_i(
    receive_endpoint: McapiEndpoint,
    buffer: *mut c_void,
    buffer_size: usize,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(request.cast(), "request is NULL")?;
        if buffer.is_null() && buffer_size > 0 {
            return Err(McapiError::Parameter("buffer is NULL"));
        }
        let r = n.msg_recv_i(endpoint_of(receive_endpoint)?)?;
        issue_checked(
            &n,
            request,
            r,
            Out::Msg {
                buf: buffer as usize,
                cap: buffer_size,
            },
        )
    })
}

/// `mcapi_msg_recv` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` valid for `buffer_size` bytes; `received_size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_recv(
    receive_endpoint: McapiEndpoint,
    buffer: *mut c_void,
    buffer_size: usize,
    received_size: *mut usize,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        if buffer.is_null() && buffer_size > 0 {
            return Err(McapiError::Parameter("buffer is NULL"));
        }
        need(received_size.cast(), "received_size is NULL")?;
        let data = node()?.msg_recv(endpoint_of(receive_endpoint)?)?;
        let n = data.len().min(buffer_size);
        if n > 0 {
            // SAFETY: buffer valid for buffer_size >= n bytes.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buffer.cast::<u8>(), n) };
        }
        // SAFETY: checked non-NULL.
        unsafe { *received_size = n };
        if data.len() > buffer_size {
            set_error(
                &McapiError::Truncated {
                    size: data.len(),
                    capacity: buffer_size,
                }
                .to_string(),
            );
            return Ok(((), Status::ErrMsgTruncated));
        }
        ok(())
    })
}

/// `mcapi_msg_available` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_msg_available(
    receive_endpoint: McapiEndpoint,
    mcapi_status: *mut McapiStatus,
) -> u32 {
    call(mcapi_status, || {
        ok(node()?.msg_available(endpoint_of(receive_endpoint)?)? as u32)
    })
}

// ------------------------------------------------------------------- channels

unsafe fn connect(
    kind: ChanKind,
    send_endpoint: McapiEndpoint,
    receive_endpoint: McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(request.cast(), "request is NULL")?;
        let r = n.connect_i(
            endpoint_of(send_endpoint)?,
            endpoint_of(receive_endpoint)?,
            kind,
        )?;
        issue_checked(&n, request, r, Out::None)
    })
}

unsafe fn open(
    kind: ChanKind,
    dir: Direction,
    handle_out: *mut McapiHandle,
    ep: McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(request.cast(), "request is NULL")?;
        need(handle_out.cast(), "handle is NULL")?;
        let r = n.open_i(endpoint_of(ep)?, kind, dir)?;
        issue_checked(
            &n,
            request,
            r,
            Out::Handle {
                out: handle_out as usize,
            },
        )
    })
}

unsafe fn close(
    kind: ChanKind,
    dir: Direction,
    h: McapiHandle,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(request.cast(), "request is NULL")?;
        let r = n.close_i(handle(h, kind, dir)?)?;
        issue_checked(&n, request, r, Out::None)
    })
}

/// `mcapi_pktchan_connect_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_connect_i(
    send_endpoint: McapiEndpoint,
    receive_endpoint: McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    connect(
        ChanKind::Packet,
        send_endpoint,
        receive_endpoint,
        request,
        mcapi_status,
    )
}

/// `mcapi_pktchan_recv_open_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `recv_handle` valid until the request completes; `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_recv_open_i(
    recv_handle: *mut McapiHandle,
    receive_endpoint: McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    open(
        ChanKind::Packet,
        Direction::Receive,
        recv_handle,
        receive_endpoint,
        request,
        mcapi_status,
    )
}

/// `mcapi_pktchan_send_open_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `send_handle` valid until the request completes; `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_send_open_i(
    send_handle: *mut McapiHandle,
    send_endpoint: McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    open(
        ChanKind::Packet,
        Direction::Send,
        send_handle,
        send_endpoint,
        request,
        mcapi_status,
    )
}

/// `mcapi_pktchan_send_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` valid for `size` bytes; `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_send_i(
    send_handle: McapiHandle,
    buffer: *const c_void,
    size: usize,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(request.cast(), "request is NULL")?;
        let data = bytes(buffer, size)?;
        let r = n.pktchan_send_i(
            handle(send_handle, ChanKind::Packet, Direction::Send)?,
            data,
        )?;
        issue_checked(&n, request, r, Out::None)
    })
}

/// `mcapi_pktchan_send` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` valid for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_send(
    send_handle: McapiHandle,
    buffer: *const c_void,
    size: usize,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let data = bytes(buffer, size)?;
        node()?.pktchan_send(
            handle(send_handle, ChanKind::Packet, Direction::Send)?,
            data,
        )?;
        ok(())
    })
}

/// `mcapi_pktchan_recv_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` valid until the request completes; `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_recv_i(
    receive_handle: McapiHandle,
    buffer: *mut *mut c_void,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        let n = node()?;
        need(request.cast(), "request is NULL")?;
        need(buffer.cast(), "buffer is NULL")?;
        let r = n.pktchan_recv_i(handle(
            receive_handle,
            ChanKind::Packet,
            Direction::Receive,
        )?)?;
        issue_checked(
            &n,
            request,
            r,
            Out::Pkt {
                out: buffer as usize,
            },
        )
    })
}

/// `mcapi_pktchan_recv` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` and `received_size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_recv(
    receive_handle: McapiHandle,
    buffer: *mut *mut c_void,
    received_size: *mut usize,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        need(buffer.cast(), "buffer is NULL")?;
        need(received_size.cast(), "received_size is NULL")?;
        let n = node()?;
        let h = handle(receive_handle, ChanKind::Packet, Direction::Receive)?;
        let max = n.topology().max_packet_buffers;
        if tables(|t| t.packets.len()) >= max {
            return Err(McapiError::MemLimit(
                "too many packet buffers unreleased: call mcapi_pktchan_release",
            ));
        }
        let data = n.pktchan_recv(h)?;
        let size = data.len();
        let mut b: Box<[u8]> = if data.is_empty() {
            vec![0u8; 1].into_boxed_slice()
        } else {
            data.into_boxed_slice()
        };
        let ptr = b.as_mut_ptr();
        tables(|t| t.packets.insert(ptr as usize, b));
        // SAFETY: checked non-NULL out-pointers.
        unsafe {
            *buffer = ptr.cast();
            *received_size = size;
        }
        ok(())
    })
}

/// `mcapi_pktchan_available` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_available(
    receive_handle: McapiHandle,
    mcapi_status: *mut McapiStatus,
) -> u32 {
    call(mcapi_status, || {
        let h = handle(receive_handle, ChanKind::Packet, Direction::Receive)?;
        ok(node()?.chan_available(h)? as u32)
    })
}

/// `mcapi_pktchan_release` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `buffer` a pointer obtained from a packet receive, or anything (it is looked up).
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_release(
    buffer: *mut c_void,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        node()?;
        match tables(|t| t.packets.remove(&(buffer as usize))) {
            Some(_) => ok(()),
            None => Err(McapiError::BufInvalid),
        }
    })
}

/// `mcapi_pktchan_release_test` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_release_test(
    buffer: *mut c_void,
    mcapi_status: *mut McapiStatus,
) -> McapiBoolean {
    call(mcapi_status, || {
        node()?;
        // A buffer we still hold has not been released; one we do not know was (or never was
        // ours, which we cannot tell apart).
        if tables(|t| t.packets.contains_key(&(buffer as usize))) {
            Ok((0, Status::Pending))
        } else {
            ok(1)
        }
    })
}

/// `mcapi_pktchan_recv_close_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_recv_close_i(
    receive_handle: McapiHandle,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    close(
        ChanKind::Packet,
        Direction::Receive,
        receive_handle,
        request,
        mcapi_status,
    )
}

/// `mcapi_pktchan_send_close_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_pktchan_send_close_i(
    send_handle: McapiHandle,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    close(
        ChanKind::Packet,
        Direction::Send,
        send_handle,
        request,
        mcapi_status,
    )
}

/// `mcapi_sclchan_connect_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_connect_i(
    send_endpoint: McapiEndpoint,
    receive_endpoint: McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    connect(
        ChanKind::Scalar,
        send_endpoint,
        receive_endpoint,
        request,
        mcapi_status,
    )
}

/// `mcapi_sclchan_recv_open_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `receive_handle` valid until the request completes; `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_open_i(
    receive_handle: *mut McapiHandle,
    receive_endpoint: McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    open(
        ChanKind::Scalar,
        Direction::Receive,
        receive_handle,
        receive_endpoint,
        request,
        mcapi_status,
    )
}

/// `mcapi_sclchan_send_open_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `send_handle` valid until the request completes; `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_open_i(
    send_handle: *mut McapiHandle,
    send_endpoint: McapiEndpoint,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    open(
        ChanKind::Scalar,
        Direction::Send,
        send_handle,
        send_endpoint,
        request,
        mcapi_status,
    )
}

fn scl_send(h: McapiHandle, width: u8, value: u64) -> Result<((), Status), McapiError> {
    node()?.sclchan_send(handle(h, ChanKind::Scalar, Direction::Send)?, width, value)?;
    ok(())
}

fn scl_recv(h: McapiHandle, width: u8) -> Result<(u64, Status), McapiError> {
    ok(node()?.sclchan_recv(handle(h, ChanKind::Scalar, Direction::Receive)?, width)?)
}

/// `mcapi_sclchan_send_uint64` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_uint64(
    send_handle: McapiHandle,
    dataword: u64,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || scl_send(send_handle, 8, dataword))
}

/// `mcapi_sclchan_send_uint32` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_uint32(
    send_handle: McapiHandle,
    dataword: u32,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        scl_send(send_handle, 4, u64::from(dataword))
    })
}

/// `mcapi_sclchan_send_uint16` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_uint16(
    send_handle: McapiHandle,
    dataword: u16,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        scl_send(send_handle, 2, u64::from(dataword))
    })
}

/// `mcapi_sclchan_send_uint8` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_uint8(
    send_handle: McapiHandle,
    dataword: u8,
    mcapi_status: *mut McapiStatus,
) {
    call(mcapi_status, || {
        scl_send(send_handle, 1, u64::from(dataword))
    })
}

/// `mcapi_sclchan_recv_uint64` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_uint64(
    receive_handle: McapiHandle,
    mcapi_status: *mut McapiStatus,
) -> u64 {
    call(mcapi_status, || scl_recv(receive_handle, 8))
}

/// `mcapi_sclchan_recv_uint32` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_uint32(
    receive_handle: McapiHandle,
    mcapi_status: *mut McapiStatus,
) -> u32 {
    call(mcapi_status, || {
        scl_recv(receive_handle, 4).map(|(v, s)| (v as u32, s))
    })
}

/// `mcapi_sclchan_recv_uint16` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_uint16(
    receive_handle: McapiHandle,
    mcapi_status: *mut McapiStatus,
) -> u16 {
    call(mcapi_status, || {
        scl_recv(receive_handle, 2).map(|(v, s)| (v as u16, s))
    })
}

/// `mcapi_sclchan_recv_uint8` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_uint8(
    receive_handle: McapiHandle,
    mcapi_status: *mut McapiStatus,
) -> u8 {
    call(mcapi_status, || {
        scl_recv(receive_handle, 1).map(|(v, s)| (v as u8, s))
    })
}

/// `mcapi_sclchan_available` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `mcapi_status` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_available(
    receive_handle: McapiHandle,
    mcapi_status: *mut McapiStatus,
) -> u32 {
    call(mcapi_status, || {
        let h = handle(receive_handle, ChanKind::Scalar, Direction::Receive)?;
        ok(node()?.chan_available(h)? as u32)
    })
}

/// `mcapi_sclchan_recv_close_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_recv_close_i(
    receive_handle: McapiHandle,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    close(
        ChanKind::Scalar,
        Direction::Receive,
        receive_handle,
        request,
        mcapi_status,
    )
}

/// `mcapi_sclchan_send_close_i` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_sclchan_send_close_i(
    send_handle: McapiHandle,
    request: *mut McapiRequest,
    mcapi_status: *mut McapiStatus,
) {
    close(
        ChanKind::Scalar,
        Direction::Send,
        send_handle,
        request,
        mcapi_status,
    )
}

// ------------------------------------------------------------------- requests

/// `mcapi_test` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` and `size` valid for the access.
#[no_mangle]
pub unsafe extern "C" fn mcapi_test(
    request: *mut McapiRequest,
    size: *mut usize,
    mcapi_status: *mut McapiStatus,
) -> McapiBoolean {
    call(mcapi_status, || {
        need(size.cast(), "size is NULL")?;
        let n = node()?;
        let (raw, r) = request_of(request)?;
        match n.test(r) {
            Ok(None) => Ok((0, Status::Pending)),
            Ok(Some(c)) => {
                let (sz, st) = apply(raw, c)?;
                // SAFETY: checked non-NULL.
                unsafe { *size = sz };
                Ok((1, st))
            }
            Err(e) => {
                if !matches!(e, McapiError::RequestInvalid) {
                    forget(raw);
                }
                Err(e)
            }
        }
    })
}

/// `mcapi_wait` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` and `size` valid for the access.
#[no_mangle]
pub unsafe extern "C" fn mcapi_wait(
    request: *mut McapiRequest,
    size: *mut usize,
    timeout: u32,
    mcapi_status: *mut McapiStatus,
) -> McapiBoolean {
    call(mcapi_status, || {
        need(size.cast(), "size is NULL")?;
        let n = node()?;
        let (raw, r) = request_of(request)?;
        match n.wait(r, timeout_of(timeout)) {
            Ok(c) => {
                let (sz, st) = apply(raw, c)?;
                // SAFETY: checked non-NULL.
                unsafe { *size = sz };
                Ok((u8::from(st == Status::Success), st))
            }
            Err(e) => {
                if !matches!(e, McapiError::RequestInvalid | McapiError::Timeout) {
                    forget(raw);
                }
                Err(e)
            }
        }
    })
}

/// `mcapi_wait_any` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `requests` holds `number` pointers valid for reads; `size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mcapi_wait_any(
    number: usize,
    requests: *mut *mut McapiRequest,
    size: *mut usize,
    timeout: u32,
    mcapi_status: *mut McapiStatus,
) -> u32 {
    let mut index = u32::MAX;
    call(mcapi_status, || {
        need(size.cast(), "size is NULL")?;
        need(requests.cast(), "requests is NULL")?;
        if number == 0 {
            return Err(McapiError::Parameter("number is 0"));
        }
        let n = node()?;
        let mut ids = Vec::with_capacity(number);
        for i in 0..number {
            // SAFETY: `requests` holds `number` entries.
            let p = unsafe { *requests.add(i) };
            ids.push(request_of(p)?);
        }
        let rs: Vec<RequestId> = ids.iter().map(|(_, r)| *r).collect();
        let (i, res) = n.wait_any(&rs, timeout_of(timeout))?;
        index = i as u32;
        let raw = ids[i].0;
        match res {
            Ok(c) => {
                let (sz, st) = apply(raw, c)?;
                // SAFETY: checked non-NULL.
                unsafe { *size = sz };
                Ok(((), st))
            }
            Err(e) => {
                forget(raw);
                Err(e)
            }
        }
    });
    index
}

/// `mcapi_cancel` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `request` valid for a read.
#[no_mangle]
pub unsafe extern "C" fn mcapi_cancel(request: *mut McapiRequest, mcapi_status: *mut McapiStatus) {
    call(mcapi_status, || {
        let n = node()?;
        let (_, r) = request_of(request)?;
        n.cancel(r)?;
        ok(())
    })
}

/// `mcapi_display_status` of kioku_mcapi.h, which documents it.
///
/// # Safety
/// `status_message` NULL or valid for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcapi_display_status(
    status: McapiStatus,
    status_message: *mut c_char,
    size: usize,
) -> *mut c_char {
    if status_message.is_null() || size == 0 {
        return status_message;
    }
    let name = Status::from_code(status)
        .map(Status::name)
        .unwrap_or("MCAPI_UNKNOWN_STATUS");
    let n = name.len().min(size - 1);
    // SAFETY: status_message valid for size bytes; we write n + 1 <= size.
    unsafe {
        std::ptr::copy_nonoverlapping(name.as_ptr(), status_message.cast::<u8>(), n);
        *status_message.add(n) = 0;
    }
    status_message
}

/// `kioku_mcapi_last_error` of kioku_mcapi.h, which documents it.
#[no_mangle]
pub extern "C" fn kioku_mcapi_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
