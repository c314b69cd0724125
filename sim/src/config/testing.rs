//! Requests the configuration replay's unit tests share.

use crate::readers::Request;

/// A GET of `/api/items` on `api.example.com` from `ip` at `at_ms`.
pub(super) fn request(ip: &str, at_ms: u64) -> Request {
    let mut r = Request::default();
    r.time_ms = at_ms;
    r.set_method(b"GET");
    r.set_host(b"api.example.com");
    r.set_target(b"/api/items");
    r.set_client_ip(ip.as_bytes());
    r
}

/// Requests from a pool of clients and keys, some writes, some without a key; consecutive
/// ones differ (in time or size) so a step never mistakes another's prepared values.
pub(super) fn mixed_requests(n: u64) -> Vec<Request> {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..n)
        .map(|i| {
            let r = next();
            let mut request = request(&format!("198.51.100.{}", r % 40), i * 7 + r % 5);
            if r % 4 == 0 {
                request.set_method(b"POST");
                request.add_header(b"x-user", format!("u{}", r % 9).as_bytes());
            }
            if r % 5 != 0 {
                request.add_header(b"authorization", format!("key-{}", r % 15).as_bytes());
            }
            request
        })
        .collect()
}
