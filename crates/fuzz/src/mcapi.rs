//! What an MCAPI node reads from a TCP connection before and after the handshake: hello,
//! challenge and verdict messages, and frame headers (kind, lengths) — each must be refused or
//! decoded, never trusted past its checks.

use kioku_mcapi::wire::{decode_verdict, Challenge, Header, Hello, HEADER_LEN};

/// Input: a selector byte, then the bytes of one message.
pub fn mcapi_wire(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 4 {
        0 => {
            if let Some(h) = Hello::decode(rest) {
                assert_eq!(
                    Hello::decode(&h.encode()),
                    Some(h),
                    "hello does not round-trip"
                );
            }
        }
        1 => {
            let _ = Challenge::decode(rest);
        }
        2 => {
            let _ = decode_verdict(rest);
        }
        _ => {
            for chunk in rest.chunks_exact(HEADER_LEN) {
                let h: &[u8; HEADER_LEN] = chunk.try_into().expect("header length");
                if let Ok(head) = Header::decode(h) {
                    assert!(
                        head.len as usize <= kioku_mcapi::wire::MAX_PAYLOAD,
                        "a frame longer than the limit was accepted"
                    );
                    assert_eq!(
                        Header::decode(&head.encode()),
                        Ok(head),
                        "frame header does not round-trip"
                    );
                }
            }
        }
    }
}
