//! The library's own test bodies, which only its integration tests run: the conformance body
//! every store passes, the Lua-against-Rust differential harness, and key hygiene on a node
//! (which reads the library's key layout). What other crates' tests share too (servers, the
//! seeded generator, waits) is in `edgelimit-testkit`. Each test binary uses only some of this,
//! hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod conformance;
pub mod differential;
pub mod hygiene;
