//! Shared by the integration tests that talk to real servers. Each test binary uses only some of
//! it, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod conformance;
pub mod differential;
pub mod hygiene;
