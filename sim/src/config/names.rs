//! How identifiers are shown in reports: as keyed, so an API key appears only as its hash (the
//! configuration's `api-key:` sources hash before use) and a long value as the Worker bounded it.

use edgelimit::store::key::encode_identifier;
use edgelimit::Identifier;
use edgelimit_engine::rules::ADDRESS_FALLBACK;

/// Printable text as it is; anything else (control bytes, the Worker's hashed long values) in
/// the escaped form Redis keys use. The shared bucket of `missing = "shared"` is `(shared)`, and
/// a client address counted for a request without the limit's identifier (`missing = "ip"`)
/// `(no identifier) <address>`.
pub fn display_identifier(id: &Identifier) -> String {
    let bytes = id.as_bytes();
    if bytes.is_empty() {
        return "(shared)".to_string();
    }
    if let Some((&ADDRESS_FALLBACK, address)) = bytes.split_first() {
        if let Ok(address) = std::str::from_utf8(address) {
            return format!("(no identifier) {address}");
        }
    }
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) => text.to_string(),
        _ => encode_identifier(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_show_as_text_or_as_keyed() {
        assert_eq!(display_identifier(&"203.0.113.7".into()), "203.0.113.7");
        assert_eq!(display_identifier(&"ü".into()), "ü");
        assert_eq!(display_identifier(&"".into()), "(shared)");
        assert_eq!(
            display_identifier(&vec![ADDRESS_FALLBACK, b'1', b'.', b'2'].into()),
            "(no identifier) 1.2"
        );
        assert_eq!(display_identifier(&vec![0xFF, 1].into()), "%FF%01");
    }
}
