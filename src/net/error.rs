//! What can be wrong with an address, a network, a grouping or a trusted-proxy setting.

/// Why an address, a network or a client-address setting was refused. Each message names the
/// value at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// The text is not an IPv4 or IPv6 address.
    #[error("`{0}` is not an IPv4 or IPv6 address")]
    NotAnAddress(String),
    /// The prefix length is not a number from 0 to the address's bits.
    #[error("`/{len}` is not a prefix length from 0 to {max}")]
    PrefixLength {
        /// The length as written.
        len: String,
        /// The address family's bits (32 or 128).
        max: u8,
    },
    /// The IPv6 grouping prefix is outside 1..=128.
    #[error("ipv6_prefix {0} is not a prefix length from 1 to 128")]
    Ipv6Prefix(u8),
    /// An entry of a trusted-proxy list is not an address, a network or a known set.
    #[error(
        "trusted proxy {index} (`{entry}`): {reason} (expected an address, a network such as \
         10.0.0.0/8, or one of {})",
        crate::net::named::NAMED_RANGES
    )]
    TrustedProxy {
        /// The entry's position in the list, from 0.
        index: usize,
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The header name is not one a forwarding chain is read from.
    #[error("`{0}` is not a proxy header (expected x-forwarded-for, forwarded or x-real-ip)")]
    ProxyHeader(String),
}
