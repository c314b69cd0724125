use proptest::prelude::*;

use super::*;

fn read(raw: &str) -> Result<String, UnreadablePath> {
    path(raw).map(Cow::into_owned)
}

#[test]
fn unreserved_escapes_are_decoded_and_others_upper_cased() {
    assert_eq!(read("/%61pi/").unwrap(), "/api/");
    assert_eq!(read("/a%70i/%7Eme/%2d%2E%5f").unwrap(), "/api/~me/-._");
    // Visible ASCII is one character whichever way it is sent: nginx decodes every escape.
    assert_eq!(read("/v1/jobs%3acancel").unwrap(), "/v1/jobs:cancel");
    assert_eq!(read("/u/%40me/%2B%21").unwrap(), "/u/@me/+!");
    // Those whose literal means something else in a path stay escaped, upper-cased.
    assert_eq!(
        read("/100%25/a%3fb%23c%3bd").unwrap(),
        "/100%25/a%3Fb%23c%3Bd"
    );
    // A space and non-ASCII bytes are escaped, sent raw or not.
    assert_eq!(read("/read me").unwrap(), "/read%20me");
    assert_eq!(read("/caf%c3%a9").unwrap(), "/caf%C3%A9");
    assert_eq!(read("/café").unwrap(), "/caf%C3%A9");
    // A double encoding is decoded once: a literal `%`, then text.
    assert_eq!(read("/%252F").unwrap(), "/%252F");
}

#[test]
fn slashes_merge_and_dot_segments_resolve() {
    for (raw, read_as) in [
        ("/", "/"),
        ("//", "/"),
        ("//api//x", "/api/x"),
        ("/api/", "/api/"),
        ("/api//", "/api/"),
        ("/api/.", "/api/"),
        ("/api/./x", "/api/x"),
        ("/api/..", "/"),
        ("/api/x/..", "/api/"),
        ("/a/b/../c", "/a/c"),
        ("/admin/../api/x", "/api/x"),
        // Merged first, then resolved: `..` takes `b` away, not the empty segment.
        ("/a/b//../c", "/a/c"),
        ("/x/%2e%2E/api", "/api"),
        ("/x/.%2e/api", "/api"),
        ("/./api", "/api"),
        ("/...", "/..."),
        ("/.a/a./..a", "/.a/a./..a"),
        ("/.%3F/x", "/.%3F/x"),
    ] {
        assert_eq!(read(raw).as_deref(), Ok(read_as), "{raw}");
    }
}

#[test]
fn what_origins_read_differently_is_refused() {
    use UnreadablePath::*;
    for (raw, why) in [
        ("", NotAbsolute),
        ("*", NotAbsolute),
        ("api/", NotAbsolute),
        ("%2Fapi", NotAbsolute),
        ("/api%", BadEscape),
        ("/api%4", BadEscape),
        ("/api%4/", BadEscape),
        ("/api%G1", BadEscape),
        ("/api%%41", BadEscape),
        ("/api%é", BadEscape),
        ("/..", AboveRoot),
        ("/../api", AboveRoot),
        ("/api/../..", AboveRoot),
        ("/a/%2e%2e/%2E%2E/x", AboveRoot),
        ("/api%2Fx", EncodedSlash),
        ("/api%2fx", EncodedSlash),
        ("/api\\x", Backslash),
        ("/api%5cx", Backslash),
        ("/api%00", Control),
        ("/api%0A", Control),
        ("/api%7f", Control),
        ("/api\tx", Control),
        ("/api;jsessionid=1/x", Semicolon),
        ("/admin;/", Semicolon),
        ("/api?x=1", QueryOrFragment),
        ("/api#x", QueryOrFragment),
    ] {
        assert_eq!(read(raw), Err(why), "{raw}");
        assert!(!why.to_string().is_empty());
    }
}

#[test]
fn a_path_already_read_is_borrowed() {
    for raw in [
        "/",
        "/api/",
        "/v1/jobs:cancel",
        "/caf%C3%A9",
        "/100%25",
        "/a%3Fb",
        "/...",
    ] {
        assert!(
            matches!(path(raw), Ok(Cow::Borrowed(p)) if p == raw),
            "{raw}"
        );
    }
    for raw in ["/%61", "/caf%c3%a9", "//", "/a/.", "/%3A", "/a b"] {
        assert!(matches!(path(raw), Ok(Cow::Owned(_))), "{raw}");
    }
}

#[test]
fn the_fast_checks_table_is_what_a_byte_reads_as() {
    for byte in 0..=255u8 {
        let literal = byte != b'/' && sent(byte) == Ok(Sent::Literal);
        assert_eq!(LITERAL[usize::from(byte)], literal, "{byte:#04x}");
    }
}

#[test]
fn a_rules_path_refuses_every_parent_segment() {
    assert_eq!(configured_path("/a%70i/").as_deref(), Ok("/api/"));
    assert_eq!(configured_path("/a//b/./c").as_deref(), Ok("/a/b/c"));
    assert_eq!(
        configured_path("/a/../b"),
        Err(UnreadablePath::ParentSegment)
    );
    assert_eq!(
        configured_path("/a/%2E%2e/b"),
        Err(UnreadablePath::ParentSegment)
    );
    assert_eq!(configured_path("/a%2"), Err(UnreadablePath::BadEscape));
}

#[test]
fn hosts_read_lower_case_without_port_or_trailing_dot() {
    for (raw, read_as) in [
        ("", ""),
        ("shop.example.com", "shop.example.com"),
        ("Shop.Example.COM", "shop.example.com"),
        ("shop.example.com.", "shop.example.com"),
        ("shop.example.com.:443", "shop.example.com"),
        ("shop.example.com:80", "shop.example.com"),
        ("shop.example.com:8443", "shop.example.com"),
        ("shop.example.com:", "shop.example.com"),
        ("localhost", "localhost"),
        ("[::1]", "[::1]"),
        ("[::1]:8080", "[::1]"),
        ("[2001:DB8::1]", "[2001:db8::1]"),
        ("192.0.2.1:80", "192.0.2.1"),
    ] {
        assert_eq!(host(raw).as_deref(), Ok(read_as), "{raw}");
    }
    assert!(matches!(host("api.example.com:443"), Ok(Cow::Borrowed(_))));
    use UnreadableHost::*;
    for (raw, why) in [
        ("shop..example.com", EmptyLabel),
        (".example.com", EmptyLabel),
        ("example.com..", EmptyLabel),
        (".", Empty),
        (":80", Empty),
        ("example.com:80x", Port),
        ("example.com:80:80", Port),
        ("exa mple.com", Character),
        ("example.com/x", Character),
        ("example.com\\x", Character),
        ("exa\0mple.com", Character),
        ("[::1", Literal),
        ("[::1]x", Literal),
        ("[]", Literal),
        ("[::g]", Literal),
        ("a]b", Character),
    ] {
        assert_eq!(host(raw), Err(why), "{raw}");
    }
}

/// Pieces of path-like text: unreserved characters, dots, slashes, escapes good and bad (of
/// unreserved, reserved, special, control and non-ASCII bytes, in either case), reserved
/// characters, spaces, non-ASCII, and what is refused raw.
const PIECES: &[&str] = &[
    "a", "api", "Z9", "x", "-", "_", "~", ".", "..", "...", "/", "//", "/", "/", "%41", "%61",
    "%7e", "%2e", "%2E", "%2F", "%3a", "%3A", "%40", "%2B", "%25", "%3f", "%23", "%3b", "%20",
    "%c3%a9", "%C3%A9", "%ff", "%00", "%1F", "%7f", "%5c", "%", "%4", "%g1", "%%", ":", "@", "!",
    "$", "&", "'", "(", ")", "*", "+", ",", "=", "\"", "<", "{", " ", "é", ";", "?", "#", "\\",
];

/// Path-like text: a `/` and pieces.
fn path_like() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(PIECES), 0..14)
        .prop_map(|pieces| format!("/{}", pieces.concat()))
}

/// Text of unreserved characters and slashes.
fn unreserved_path() -> impl Strategy<Value = String> {
    "(/[A-Za-z0-9._~-]{0,5}){1,6}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn reading_twice_reads_the_same(raw in path_like()) {
        if let Ok(once) = path(&raw) {
            let twice = path(&once);
            prop_assert_eq!(twice.as_deref(), Ok(once.as_ref()));
            // What the slow reading writes, the fast check knows as read.
            prop_assert!(matches!(twice, Ok(Cow::Borrowed(_))), "{} → {}", raw, once);
        }
    }

    #[test]
    fn a_read_path_has_no_empty_dot_or_unreserved_escape(raw in path_like()) {
        if let Ok(read) = path(&raw) {
            prop_assert!(read.starts_with('/'));
            for bad in ["//", "/./", "/../"] {
                prop_assert!(!read.contains(bad), "{} → {}", raw, read);
            }
            prop_assert!(!read.ends_with("/.") && !read.ends_with("/.."), "{} → {}", raw, read);
            let bytes = read.as_bytes();
            for (i, _) in read.match_indices('%') {
                let digits = &bytes[i + 1..i + 3];
                prop_assert!(
                    digits.iter().all(|d| d.is_ascii_digit() || (b'A'..=b'F').contains(d)),
                    "{} → {}", raw, read
                );
                let byte = u8::from_str_radix(std::str::from_utf8(digits).unwrap(), 16).unwrap();
                prop_assert!(
                    !(byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)),
                    "{} → {}: an escaped unreserved character", raw, read
                );
            }
        }
    }

    #[test]
    fn escaping_unreserved_characters_changes_no_reading(
        plain in unreserved_path(),
        choices in proptest::collection::vec((any::<bool>(), any::<bool>()), 40),
    ) {
        // Escape some characters, with upper- or lower-case digits.
        let mut spelled = String::new();
        for (i, c) in plain.chars().enumerate() {
            let (escape, lower) = choices[i % choices.len()];
            if escape && c != '/' {
                let text = format!("%{:02X}", c as u32);
                spelled.push_str(&if lower { text.to_lowercase() } else { text });
            } else {
                spelled.push(c);
            }
        }
        prop_assert_eq!(path(&spelled), path(&plain), "{} / {}", spelled, plain);
    }

    #[test]
    fn escaping_any_visible_character_but_the_special_changes_no_reading(
        plain in "(/[!$&'()*+,:=@A-Za-z0-9._~-]{1,5}){1,4}",
        lower in any::<bool>(),
    ) {
        let spelled: String = plain
            .chars()
            .map(|c| if c == '/' { c.to_string() } else {
                let text = format!("%{:02X}", c as u32);
                if lower { text.to_lowercase() } else { text }
            })
            .collect();
        prop_assert_eq!(path(&spelled), path(&plain));
    }

    #[test]
    fn a_hosts_spellings_read_alike(
        name in "[a-z0-9-]{1,8}(\\.[a-z0-9-]{1,8}){0,3}",
        upper in proptest::collection::vec(any::<bool>(), 36),
        dot in any::<bool>(),
        port in proptest::option::of(0u16..),
    ) {
        let mut spelled: String = name
            .chars()
            .zip(upper.iter().cycle())
            .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
            .collect();
        if dot {
            spelled.push('.');
        }
        if let Some(port) = port {
            spelled.push_str(&format!(":{port}"));
        }
        let read = host(&spelled);
        prop_assert_eq!(read.as_deref(), Ok(name.as_str()));
        let plain = host(&name);
        prop_assert_eq!(plain.as_deref(), Ok(name.as_str()));
    }
}
