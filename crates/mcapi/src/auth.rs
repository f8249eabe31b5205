//! Proof that a peer belongs to the same job: HMAC-SHA256 over the job's secret. The TCP
//! handshake is a mutual challenge-response (the secret never crosses the wire); shared-memory
//! segments carry a tag only a holder of the secret can make.
//!
//! Handshake, connector C to acceptor A, fixed-size messages:
//! 1. C→A `Hello`: magic, topology fingerprint, C's and A's node ids, C's incarnation, nonce_c.
//! 2. A→C `Challenge`: A's incarnation, nonce_a, a refusal code (0 = go on), and
//!    mac_a = HMAC(secret, "acceptor" | both hellos' fields).
//! 3. C→A `Proof`: mac_c = HMAC(secret, "connector" | the same fields), sent only if mac_a verified.
//! 4. A→C `Verdict`: accepted (the connection then carries frames both ways), or refused.
//!    Two nodes that dial each other at once keep the connection the lower id dialled: the
//!    lower one refuses the other with `CROSSING` while its own dial is in progress, and the
//!    higher one drops its own dial when it accepts the lower one's. Nothing is written on a
//!    connection before its verdict, so no frame is lost with the connection that loses.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Version 2: one connection both ways (version 1 used one connection per direction; the two
/// do not interoperate, so they refuse each other's hello).
pub const MAGIC: [u8; 8] = *b"KMCAPI\x02\x00";
pub const HELLO_LEN: usize = 88;
pub const CHALLENGE_LEN: usize = 96;
pub const PROOF_LEN: usize = 40;
pub const VERDICT_LEN: usize = 16;

/// Refusal codes of `Challenge` and `Verdict`.
pub mod code {
    pub const OK: u32 = 0;
    /// The hello named another node, or another topology (job, nodes, addresses, limits).
    pub const WRONG_TOPOLOGY: u32 = 3;
    /// The two nodes already share a connection, or the acceptor (the lower id) is dialling
    /// the connector at the same time: the connector uses that connection instead.
    pub const CROSSING: u32 = 4;
}

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b).expect("the kernel's random source is available");
    b
}

pub fn random_u64() -> u64 {
    loop {
        let v = u64::from_le_bytes(random_bytes::<8>());
        if v != 0 {
            return v;
        }
    }
}

fn mac(secret: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    for p in parts {
        m.update(&(p.len() as u32).to_le_bytes());
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn verify(secret: &[u8], parts: &[&[u8]], tag: &[u8; 32]) -> bool {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    for p in parts {
        m.update(&(p.len() as u32).to_le_bytes());
        m.update(p);
    }
    m.verify_slice(tag).is_ok() // constant time
}

/// The tag in a shared-memory segment of `node`.
pub fn segment_tag(secret: &[u8], fingerprint: &[u8; 32], node: u32) -> [u8; 32] {
    mac(secret, &[b"shm-segment", fingerprint, &node.to_le_bytes()])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub fingerprint: [u8; 32],
    pub from: u32,
    pub to: u32,
    pub incarnation: u64,
    pub nonce: [u8; 32],
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..40].copy_from_slice(&self.fingerprint);
        b[40..44].copy_from_slice(&self.from.to_le_bytes());
        b[44..48].copy_from_slice(&self.to.to_le_bytes());
        b[48..56].copy_from_slice(&self.incarnation.to_le_bytes());
        b[56..88].copy_from_slice(&self.nonce);
        b
    }

    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() != HELLO_LEN || b[0..8] != MAGIC {
            return None;
        }
        Some(Hello {
            fingerprint: b[8..40].try_into().ok()?,
            from: u32::from_le_bytes(b[40..44].try_into().ok()?),
            to: u32::from_le_bytes(b[44..48].try_into().ok()?),
            incarnation: u64::from_le_bytes(b[48..56].try_into().ok()?),
            nonce: b[56..88].try_into().ok()?,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub incarnation: u64,
    pub nonce: [u8; 32],
    pub code: u32,
    pub mac: [u8; 32],
}

/// The fields both MACs cover.
fn transcript(hello: &Hello, acceptor_inc: u64, nonce_a: &[u8; 32]) -> [u8; 120] {
    let mut t = [0u8; 120];
    t[0..32].copy_from_slice(&hello.fingerprint);
    t[32..36].copy_from_slice(&hello.from.to_le_bytes());
    t[36..40].copy_from_slice(&hello.to.to_le_bytes());
    t[40..48].copy_from_slice(&hello.incarnation.to_le_bytes());
    t[48..80].copy_from_slice(&hello.nonce);
    t[80..88].copy_from_slice(&acceptor_inc.to_le_bytes());
    t[88..120].copy_from_slice(nonce_a);
    t
}

impl Challenge {
    pub fn new(secret: &[u8], hello: &Hello, incarnation: u64, code: u32) -> Challenge {
        let nonce = random_bytes::<32>();
        let mac = mac(
            secret,
            &[b"acceptor", &transcript(hello, incarnation, &nonce)],
        );
        Challenge {
            incarnation,
            nonce,
            code,
            mac,
        }
    }

    /// The acceptor holds the secret.
    pub fn verify(&self, secret: &[u8], hello: &Hello) -> bool {
        verify(
            secret,
            &[
                b"acceptor",
                &transcript(hello, self.incarnation, &self.nonce),
            ],
            &self.mac,
        )
    }

    /// The connector's answer.
    pub fn proof(&self, secret: &[u8], hello: &Hello) -> [u8; 32] {
        mac(
            secret,
            &[
                b"connector",
                &transcript(hello, self.incarnation, &self.nonce),
            ],
        )
    }

    /// The connector holds the secret.
    pub fn verify_proof(&self, secret: &[u8], hello: &Hello, proof: &[u8; 32]) -> bool {
        verify(
            secret,
            &[
                b"connector",
                &transcript(hello, self.incarnation, &self.nonce),
            ],
            proof,
        )
    }

    pub fn encode(&self) -> [u8; CHALLENGE_LEN] {
        let mut b = [0u8; CHALLENGE_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..16].copy_from_slice(&self.incarnation.to_le_bytes());
        b[16..48].copy_from_slice(&self.nonce);
        b[48..52].copy_from_slice(&self.code.to_le_bytes());
        b[64..96].copy_from_slice(&self.mac);
        b
    }

    pub fn decode(b: &[u8]) -> Option<Challenge> {
        if b.len() != CHALLENGE_LEN || b[0..8] != MAGIC {
            return None;
        }
        Some(Challenge {
            incarnation: u64::from_le_bytes(b[8..16].try_into().ok()?),
            nonce: b[16..48].try_into().ok()?,
            code: u32::from_le_bytes(b[48..52].try_into().ok()?),
            mac: b[64..96].try_into().ok()?,
        })
    }
}

pub fn encode_proof(proof: &[u8; 32]) -> [u8; PROOF_LEN] {
    let mut b = [0u8; PROOF_LEN];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..40].copy_from_slice(proof);
    b
}

pub fn decode_proof(b: &[u8]) -> Option<[u8; 32]> {
    (b.len() == PROOF_LEN && b[0..8] == MAGIC).then(|| b[8..40].try_into().expect("32 bytes"))
}

pub fn encode_verdict(code: u32) -> [u8; VERDICT_LEN] {
    let mut b = [0u8; VERDICT_LEN];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&code.to_le_bytes());
    b
}

pub fn decode_verdict(b: &[u8]) -> Option<u32> {
    (b.len() == VERDICT_LEN && b[0..8] == MAGIC)
        .then(|| u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_prove_the_secret_and_a_wrong_secret_fails() {
        let hello = Hello {
            fingerprint: [1; 32],
            from: 1,
            to: 0,
            incarnation: 42,
            nonce: random_bytes(),
        };
        let h2 = Hello::decode(&hello.encode()).unwrap();
        assert_eq!(h2, hello);
        let ch = Challenge::new(b"secret-of-the-job", &hello, 7, code::OK);
        let ch2 = Challenge::decode(&ch.encode()).unwrap();
        assert!(ch2.verify(b"secret-of-the-job", &hello));
        assert!(!ch2.verify(b"another-secret", &hello));
        let p = ch2.proof(b"secret-of-the-job", &hello);
        assert_eq!(decode_proof(&encode_proof(&p)), Some(p));
        assert!(ch.verify_proof(b"secret-of-the-job", &hello, &p));
        assert!(!ch.verify_proof(b"secret-of-the-job", &hello, &ch2.proof(b"x", &hello)));
        // The proof is bound to the hello: a replay for another incarnation fails.
        let mut other = hello;
        other.incarnation = 43;
        assert!(!ch.verify_proof(b"secret-of-the-job", &other, &p));
        assert_eq!(decode_verdict(&encode_verdict(3)), Some(3));
        assert_eq!(Hello::decode(&[0u8; HELLO_LEN]), None);
    }
}
