//! Test support shared by the integration tests of several kioku crates; a dev-dependency
//! only, never part of a library.
//!
//! - [`netns`]: two "hosts" (network namespaces joined by a veth pair) for tests across real
//!   TCP links;
//! - [`cprog`]: C programs compiled against `include/` and linked against the library cargo
//!   built for the running test, and the checks that a header matches its library;
//! - [`ports`]: TCP ports to name before a server binds them, safe from outgoing connections.
//!
//! A crate rather than a file the tests `#[path]`-include: the tests of three packages (capi,
//! dsm, mcapi) use it, and a crate is compiled and linted once, with no `dead_code` allowances
//! in every test binary and no paths reaching out of a package.

pub mod cprog;
pub mod netns;
pub mod ports;
