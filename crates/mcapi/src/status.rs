//! MCAPI status codes: the values of `enum mcapi_status_codes` in `include/kioku_mcapi.h`, in
//! the order of the Multicore Association's MCAPI 2.015 reference header (first code 1).

/// One MCAPI status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Status {
    Success = 1,
    Pending,
    Timeout,
    ErrParameter,
    ErrDomainInvalid,
    ErrNodeInvalid,
    ErrNodeInitFailed,
    ErrNodeInitialized,
    ErrNodeNotInit,
    ErrNodeFinalFailed,
    ErrPortInvalid,
    ErrEndpInvalid,
    ErrEndpExists,
    ErrEndpGetLimit,
    ErrEndpDeleted,
    ErrEndpNotOwner,
    ErrEndpRemote,
    ErrEndpNoPorts,
    ErrEndpLimit,
    ErrAttrIncompatible,
    ErrAttrSize,
    ErrAttrNum,
    ErrAttrValue,
    ErrAttrNotSupported,
    ErrAttrReadOnly,
    ErrMsgLimit,
    ErrMsgTruncated,
    ErrChanOpen,
    ErrChanType,
    ErrChanDirection,
    ErrChanConnected,
    ErrChanOpenPending,
    ErrChanNotOpen,
    ErrChanInvalid,
    ErrPktLimit,
    ErrSclSize,
    ErrTransmission,
    ErrPriority,
    ErrBufInvalid,
    ErrMemLimit,
    ErrRequestInvalid,
    ErrRequestLimit,
    ErrRequestCancelled,
    ErrWaitPending,
    ErrGeneral,
    StatusCodeEnd,
}

/// Every code with its C name, in value order.
pub const ALL: &[(Status, &str)] = &[
    (Status::Success, "MCAPI_SUCCESS"),
    (Status::Pending, "MCAPI_PENDING"),
    (Status::Timeout, "MCAPI_TIMEOUT"),
    (Status::ErrParameter, "MCAPI_ERR_PARAMETER"),
    (Status::ErrDomainInvalid, "MCAPI_ERR_DOMAIN_INVALID"),
    (Status::ErrNodeInvalid, "MCAPI_ERR_NODE_INVALID"),
    (Status::ErrNodeInitFailed, "MCAPI_ERR_NODE_INITFAILED"),
    (Status::ErrNodeInitialized, "MCAPI_ERR_NODE_INITIALIZED"),
    (Status::ErrNodeNotInit, "MCAPI_ERR_NODE_NOTINIT"),
    (Status::ErrNodeFinalFailed, "MCAPI_ERR_NODE_FINALFAILED"),
    (Status::ErrPortInvalid, "MCAPI_ERR_PORT_INVALID"),
    (Status::ErrEndpInvalid, "MCAPI_ERR_ENDP_INVALID"),
    (Status::ErrEndpExists, "MCAPI_ERR_ENDP_EXISTS"),
    (Status::ErrEndpGetLimit, "MCAPI_ERR_ENDP_GET_LIMIT"),
    (Status::ErrEndpDeleted, "MCAPI_ERR_ENDP_DELETED"),
    (Status::ErrEndpNotOwner, "MCAPI_ERR_ENDP_NOTOWNER"),
    (Status::ErrEndpRemote, "MCAPI_ERR_ENDP_REMOTE"),
    (Status::ErrEndpNoPorts, "MCAPI_ERR_ENDP_NOPORTS"),
    (Status::ErrEndpLimit, "MCAPI_ERR_ENDP_LIMIT"),
    (Status::ErrAttrIncompatible, "MCAPI_ERR_ATTR_INCOMPATIBLE"),
    (Status::ErrAttrSize, "MCAPI_ERR_ATTR_SIZE"),
    (Status::ErrAttrNum, "MCAPI_ERR_ATTR_NUM"),
    (Status::ErrAttrValue, "MCAPI_ERR_ATTR_VALUE"),
    (Status::ErrAttrNotSupported, "MCAPI_ERR_ATTR_NOTSUPPORTED"),
    (Status::ErrAttrReadOnly, "MCAPI_ERR_ATTR_READONLY"),
    (Status::ErrMsgLimit, "MCAPI_ERR_MSG_LIMIT"),
    (Status::ErrMsgTruncated, "MCAPI_ERR_MSG_TRUNCATED"),
    (Status::ErrChanOpen, "MCAPI_ERR_CHAN_OPEN"),
    (Status::ErrChanType, "MCAPI_ERR_CHAN_TYPE"),
    (Status::ErrChanDirection, "MCAPI_ERR_CHAN_DIRECTION"),
    (Status::ErrChanConnected, "MCAPI_ERR_CHAN_CONNECTED"),
    (Status::ErrChanOpenPending, "MCAPI_ERR_CHAN_OPENPENDING"),
    (Status::ErrChanNotOpen, "MCAPI_ERR_CHAN_NOTOPEN"),
    (Status::ErrChanInvalid, "MCAPI_ERR_CHAN_INVALID"),
    (Status::ErrPktLimit, "MCAPI_ERR_PKT_LIMIT"),
    (Status::ErrSclSize, "MCAPI_ERR_SCL_SIZE"),
    (Status::ErrTransmission, "MCAPI_ERR_TRANSMISSION"),
    (Status::ErrPriority, "MCAPI_ERR_PRIORITY"),
    (Status::ErrBufInvalid, "MCAPI_ERR_BUF_INVALID"),
    (Status::ErrMemLimit, "MCAPI_ERR_MEM_LIMIT"),
    (Status::ErrRequestInvalid, "MCAPI_ERR_REQUEST_INVALID"),
    (Status::ErrRequestLimit, "MCAPI_ERR_REQUEST_LIMIT"),
    (Status::ErrRequestCancelled, "MCAPI_ERR_REQUEST_CANCELLED"),
    (Status::ErrWaitPending, "MCAPI_ERR_WAIT_PENDING"),
    (Status::ErrGeneral, "MCAPI_ERR_GENERAL"),
    (Status::StatusCodeEnd, "MCAPI_STATUSCODE_END"),
];

impl Status {
    /// The C value.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The C name (`MCAPI_SUCCESS` …), as `mcapi_display_status` prints it.
    pub fn name(self) -> &'static str {
        ALL[(self as u32 - 1) as usize].1
    }

    /// The status of a C value, if it is one.
    pub fn from_code(code: u32) -> Option<Status> {
        ALL.get(code.checked_sub(1)? as usize).map(|&(s, _)| s)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_dense_from_one_and_round_trip() {
        for (i, &(s, name)) in ALL.iter().enumerate() {
            assert_eq!(s.code() as usize, i + 1, "{name}");
            assert_eq!(Status::from_code(s.code()), Some(s));
            assert_eq!(s.name(), name);
        }
        assert_eq!(Status::from_code(0), None);
        assert_eq!(Status::from_code(ALL.len() as u32 + 1), None);
    }
}
