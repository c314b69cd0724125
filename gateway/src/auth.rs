//! Who may call: the bearer token (header or `_token` query parameter), compared in constant time.

use subtle::ConstantTimeEq;

/// What a request's token allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Every allowed command.
    Full,
    /// Read-only commands only.
    ReadOnly,
}

/// Compares in time independent of where the two differ (lengths may still leak, as they do
/// for every bearer-token scheme; tokens should be long and random).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The access granted to `presented`, if any.
pub fn access(presented: Option<&str>, token: &str, read_only: Option<&str>) -> Option<Access> {
    let presented = presented?;
    // Check both so the time taken does not tell which one matched.
    let full = same(presented, token);
    let read = read_only.is_some_and(|r| same(presented, r));
    if full {
        Some(Access::Full)
    } else if read {
        Some(Access::ReadOnly)
    } else {
        None
    }
}

/// The token of a request: `Authorization: Bearer <token>`, else `?_token=<token>`.
pub fn presented_token<'a>(
    authorization: Option<&'a str>,
    query: Option<&'a str>,
) -> Option<String> {
    if let Some(value) = authorization {
        let value = value.trim();
        if let Some(token) = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
        {
            return Some(token.trim().to_string());
        }
    }
    let query = query?;
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == "_token").then(|| percent_decode(value))
    })
}

/// Decodes `%XX` escapes and `+` (as the query string of a URL carries them).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            // Two hex digits, checked as such: `from_str_radix` alone also takes a sign (`%+1`).
            b'%' if i + 2 < bytes.len()
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit() =>
            {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_the_header_or_the_query() {
        assert_eq!(
            presented_token(Some("Bearer abc"), None).as_deref(),
            Some("abc")
        );
        assert_eq!(
            presented_token(None, Some("x=1&_token=a%2Bb")).as_deref(),
            Some("a+b")
        );
        assert_eq!(presented_token(Some("Basic abc"), None), None);
        assert_eq!(access(Some("abc"), "abc", None), Some(Access::Full));
        assert_eq!(
            access(Some("ro"), "abc", Some("ro")),
            Some(Access::ReadOnly)
        );
        assert_eq!(access(Some("abd"), "abc", Some("ro")), None);
        assert_eq!(access(None, "abc", None), None);
    }

    #[test]
    fn percent_decoding_keeps_malformed_escapes() {
        assert_eq!(percent_decode("a%20b%zz%4"), "a b%zz%4");
    }

    #[test]
    fn percent_signs_before_a_signed_number_are_no_escape() {
        // Found by the gateway_command fuzz target: `u8::from_str_radix("+f", 16)` is 15, so
        // `%+f` decoded to the control byte 0x0F instead of staying `%+f` (then `% f`).
        assert_eq!(percent_decode("%+f"), "% f");
        assert_eq!(percent_decode("bba~%+f++"), "bba~% f  ");
        assert_eq!(percent_decode("%-1%+1%2B"), "%-1% 1+");
    }
}
