//! The named sets of networks a trusted-proxy list may use (`loopback`, `private`, `linklocal`).

/// The named sets a trusted-proxy list may use, for messages.
pub(crate) const NAMED_RANGES: &str = "loopback, private, linklocal";

/// The ranges each named set stands for.
pub(crate) fn named(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "loopback" => &["127.0.0.0/8", "::1"],
        "private" => &["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"],
        "linklocal" => &["169.254.0.0/16", "fe80::/10"],
        _ => return None,
    })
}
