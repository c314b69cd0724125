//! Secrets out of text: what a log line, an error message or a report says about a URL, a
//! header or a setting, with every credential in it replaced by [`REDACTED`]. One function,
//! [`redact`], serves every host and tool — the Worker's log, `sim`'s reports, the admin CLI,
//! the gateway — so what one of them hides, all hide.
//!
//! What is hidden:
//!
//! - **URL user-info.** `scheme://user:PASSWORD@host` → `scheme://user:***@host`; a user-info
//!   without `:` (`scheme://TOKEN@host`) is hidden whole, since it may be the secret itself. The
//!   authority ends at the first `/`, `?` or `#` after `://`, and the user-info at the authority's
//!   **last** `@`, so a password holding `@`, `:` or `%` — raw or percent-encoded — is hidden
//!   whole and the host stays readable. A password holding a raw `/`, `?` or `#` (which a URL
//!   cannot carry, but an operator may paste) is hidden too when what comes before it is not a
//!   host and port: the user-info then runs to the last `@` of the URL.
//! - **Settings.** The value of a key ending in `token`, `password`, `passwd`, `secret`,
//!   `api_key` or `apikey`, or in `authorization` (any case), after `=` (`?_token=…` in Upstash's
//!   query strings, `KEY = "value"` in TOML), after `:` with no space (`token:x`) or a quoted key
//!   (`"token": "x"` in JSON), and after `: ` for `Authorization` (a header line, its scheme
//!   kept). A quoted value is hidden to its closing quote; an unquoted one to the next space,
//!   quote, `&`, `<` or `>`. Prose such as `the admin token: --token …` is left alone.
//! - **HTTP credentials.** What follows `Bearer ` or `Basic ` (as HTTP writes them; prose's
//!   `bearer token` is left alone).
//!
//! It errs on the side of hiding where a secret may be. It is for error paths (messages,
//! reports), not a request's hot path.

use std::borrow::Cow;
use std::ops::Range;

/// What a hidden secret is replaced with.
pub const REDACTED: &str = "***";

/// `text` with every secret it holds (see the [module](self) for which) replaced by
/// [`REDACTED`]; borrowed when there was none.
///
/// ```
/// use edgelimit::redact::redact;
///
/// assert_eq!(
///     redact("connecting to rediss://default:p@ss:w%40rd@eu1.example.com:6379 failed"),
///     "connecting to rediss://default:***@eu1.example.com:6379 failed"
/// );
/// assert_eq!(
///     redact("GET https://db.example.io/pipeline?_token=AXk2cBQ Authorization: Bearer AXk2cBQ"),
///     "GET https://db.example.io/pipeline?_token=*** Authorization: Bearer ***"
/// );
/// ```
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut hidden = Vec::new();
    let userinfos = url_secrets(text, &mut hidden);
    keyed_secrets(text, &userinfos, &mut hidden);
    scheme_credentials(text, &mut hidden);
    if hidden.is_empty() {
        return Cow::Borrowed(text);
    }
    // A handful of spans: an insertion sort, and no general sort's code in the Worker's wasm.
    for i in 1..hidden.len() {
        let mut j = i;
        while j > 0 && hidden[j - 1].start > hidden[j].start {
            hidden.swap(j - 1, j);
            j -= 1;
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut written = 0;
    let mut spans = hidden.into_iter().peekable();
    while let Some(mut span) = spans.next() {
        // Overlapping or touching spans are one secret: one marker.
        while let Some(next) = spans.next_if(|next| next.start <= span.end) {
            span.end = span.end.max(next.end);
        }
        out.push_str(&text[written..span.start]);
        out.push_str(REDACTED);
        written = span.end;
    }
    out.push_str(&text[written..]);
    Cow::Owned(out)
}

/// Where a URL ends in running text: at a space or a quote (a password with either is not
/// taken for a URL's).
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>')
}

/// Where an unquoted value ends.
fn ends_value(c: char) -> bool {
    ends_url(c) || c == '&'
}

/// The passwords (or whole user-infos) of the URLs in `text`, into `hidden`; the user-infos
/// found, whole.
fn url_secrets(text: &str, hidden: &mut Vec<Range<usize>>) -> Vec<Range<usize>> {
    let mut userinfos = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        let end = text[start..]
            .find(ends_url)
            .map_or(text.len(), |e| start + e);
        let url = &text[start..end];
        if let Some(at) = userinfo_end(url) {
            let secret = match url[..at].find(':') {
                Some(colon) => start + colon + 1..start + at,
                None => start..start + at,
            };
            if !secret.is_empty() {
                hidden.push(secret);
            }
            userinfos.push(start..start + at);
        }
        // A URL inside this one's path or query is looked at too.
        from = start;
    }
    userinfos
}

/// Where the user-info of `url` (what follows `://`) ends: the `@` before the host, if any.
fn userinfo_end(url: &str) -> Option<usize> {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let authority = &url[..authority_end];
    if let Some(at) = authority.rfind('@') {
        return Some(at);
    }
    // No `@` in the authority: either there is no user-info, or a raw `/`, `?` or `#` in a
    // password ended the authority early — then what came before is not a host and port.
    let at = url.rfind('@')?;
    (!is_host_and_port(authority)).then_some(at)
}

/// Whether `authority` reads as `host`, `host:port`, `[v6]` or `[v6]:port`.
fn is_host_and_port(authority: &str) -> bool {
    let (host_ok, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let Some((v6, rest)) = bracketed.split_once(']') else {
                return false;
            };
            let port = match rest.strip_prefix(':') {
                Some(port) => port,
                None if rest.is_empty() => "",
                None => return false,
            };
            let v6_ok = v6
                .chars()
                .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'));
            (v6_ok, port)
        }
        None => {
            // At the first `:`, so a second one makes the port no number.
            let (host, port) = authority.split_once(':').unwrap_or((authority, ""));
            let host_ok = host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '%'));
            (host_ok, port)
        }
    };
    host_ok && port.bytes().all(|b| b.is_ascii_digit())
}

/// Keys whose value is a secret (lower case): a key ending in one of these.
const SECRET_KEY_ENDINGS: &[&str] = &["token", "password", "passwd", "secret", "api_key", "apikey"];

/// The HTTP authorization header's name: its value is a secret, after its scheme.
const AUTHORIZATION: &str = "authorization";

/// The values of secret settings in `text`: `key=value`, `key: value`, `"key":"value"`. A
/// URL's user name is not a key (`https://apikey:…@host` is [`url_secrets`]'), so a key ending
/// inside one of `userinfos` is passed over.
fn keyed_secrets(text: &str, userinfos: &[Range<usize>], hidden: &mut Vec<Range<usize>>) {
    // ASCII lower-casing keeps every byte where it was.
    let lower = text.to_ascii_lowercase();
    for key in SECRET_KEY_ENDINGS.iter().chain([&AUTHORIZATION]) {
        let mut from = 0;
        while let Some(found) = lower[from..].find(key) {
            let key_end = from + found + key.len();
            from = key_end;
            if userinfos.iter().any(|u| u.contains(&key_end)) {
                continue;
            }
            if let Some(value) = value_after(text, key_end, key.ends_with(AUTHORIZATION)) {
                if !value.is_empty() {
                    hidden.push(value);
                }
            }
        }
    }
}

/// The value following a key that ends at `key_end`: after an optional closing quote, the
/// separator (`=`, or `:` as the [module](self) says) and an optional opening quote. `None`
/// when none follows (the word is prose, or part of a longer name: `token_var`). With
/// `schemed` (the authorization header), a leading scheme word (`Bearer`) is kept.
fn value_after(text: &str, key_end: usize, schemed: bool) -> Option<Range<usize>> {
    let bytes = text.as_bytes();
    let mut at = key_end;
    let quoted_key = matches!(bytes.get(at), Some(b'"' | b'\''));
    if quoted_key {
        at += 1;
    }
    while bytes.get(at) == Some(&b' ') {
        at += 1;
    }
    let separator = *bytes.get(at)?;
    at += 1;
    match separator {
        // `==` is no setting's separator.
        b'=' if bytes.get(at) != Some(&b'=') => {}
        // `://` is a URL's; `token: x` is prose unless the key is quoted or a header's.
        b':' if bytes.get(at) != Some(&b'/')
            && (quoted_key || schemed || bytes.get(at) != Some(&b' ')) => {}
        _ => return None,
    }
    while bytes.get(at) == Some(&b' ') {
        at += 1;
    }
    if let Some(&quote @ (b'"' | b'\'')) = bytes.get(at) {
        let start = at + 1;
        let end = text[start..]
            .find(quote as char)
            .map_or(text.len(), |e| start + e);
        return Some(start..end);
    }
    let mut start = at;
    let end_from = |start: usize| {
        text[start..]
            .find(ends_value)
            .map_or(text.len(), |e| start + e)
    };
    let mut end = end_from(start);
    if schemed {
        let word = text[start..end].to_ascii_lowercase();
        if AUTHORIZATION_SCHEMES.contains(&word.as_str()) && bytes.get(end) == Some(&b' ') {
            // `Authorization: Bearer X`: the scheme stays, X goes (scheme_credentials hides
            // it too, for a scheme it knows).
            start = end + 1;
            end = end_from(start);
        }
    }
    Some(start..end)
}

/// The authorization schemes an `Authorization` value may open with (lower case): kept, the
/// credentials after them hidden.
const AUTHORIZATION_SCHEMES: &[&str] = &["bearer", "basic", "digest", "negotiate", "token"];

/// Authorization schemes whose credentials are hidden wherever they appear, as HTTP writes
/// them (with their space).
const SCHEMES: &[&str] = &["Bearer ", "Basic ", "BEARER ", "BASIC "];

/// The credentials after `Bearer ` or `Basic ` in `text`.
fn scheme_credentials(text: &str, hidden: &mut Vec<Range<usize>>) {
    for scheme in SCHEMES {
        let mut from = 0;
        while let Some(found) = text[from..].find(scheme) {
            let start_of_word = from + found;
            from = start_of_word + scheme.len();
            let boundary = text[..start_of_word]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_ascii_alphanumeric());
            if !boundary {
                continue;
            }
            let mut start = from;
            while text.as_bytes().get(start) == Some(&b' ') {
                start += 1;
            }
            let end = text[start..]
                .find(ends_value)
                .map_or(text.len(), |e| start + e);
            if end > start {
                hidden.push(start..end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_password_is_hidden_and_the_user_and_host_stay() {
        for (url, shown) in [
            (
                "rediss://default:PASSWORD@eu1.example.com:6379",
                "rediss://default:***@eu1.example.com:6379",
            ),
            ("redis://:PASSWORD@127.0.0.1/0", "redis://:***@127.0.0.1/0"),
            ("redis://u:P@SS@h:1", "redis://u:***@h:1"),
            ("redis://u:P:S:S@h", "redis://u:***@h"),
            ("redis://u:P%40SS%3A@h", "redis://u:***@h"),
            ("redis://u:P%@h", "redis://u:***@h"),
            ("redis://u:12@[::1]:6379/0", "redis://u:***@[::1]:6379/0"),
            // Without `:` the user-info may be the secret itself.
            ("https://TOKEN@host/x", "https://***@host/x"),
            // A raw `/` or `#` in a password: not a host before it, so up to the last `@`.
            ("redis://u:PA/SS@host:1/0", "redis://u:***@host:1/0"),
            ("redis://u:PA#SS@host", "redis://u:***@host"),
            (
                "redis+cluster://u:PW@a:1,b:2,c:3",
                "redis+cluster://u:***@a:1,b:2,c:3",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn urls_without_user_info_are_left_alone() {
        for text in [
            "https://api.example.com/v1/x?y=1",
            "https://host:8443/users/a@b.example/profile",
            "http://[::1]:8080/x@y",
            "mailto:someone@example.com",
            "a :// b @ c",
            "no secret here: rules[0] \"api\" → limits[0] → identifier",
            "shards[0].token_var: missing field",
            "UPSTASH_REDIS_REST_TOKEN is not set: `wrangler secret put UPSTASH_REDIS_REST_TOKEN`",
            // Prose about tokens is not a token.
            "the Worker refused the admin token: --token (or EDGELIMIT_ADMIN_TOKEN) must equal",
            "metrics_path: `/m` answers a bearer token: set the EDGELIMIT_METRICS_TOKEN secret",
            "a password: at least 8 bytes",
        ] {
            assert!(matches!(redact(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn settings_and_credentials_are_hidden() {
        for (text, shown) in [
            (
                "https://x.upstash.io/get/k?_token=AXk2cBQ&a=1",
                "https://x.upstash.io/get/k?_token=***&a=1",
            ),
            ("password=HUNTER2 next", "password=*** next"),
            ("PASSWORD = 'HUNTER2'", "PASSWORD = '***'"),
            (
                "EDGELIMIT_ADMIN_TOKEN = \"SEKRIT\"\nX = 1",
                "EDGELIMIT_ADMIN_TOKEN = \"***\"\nX = 1",
            ),
            (r#"{"token":"SEKRIT","n":1}"#, r#"{"token":"***","n":1}"#),
            ("Authorization: Bearer SEKRIT", "Authorization: Bearer ***"),
            ("authorization: Basic U0VLUklU", "authorization: Basic ***"),
            ("authorization=SEKRIT", "authorization=***"),
            ("sent Bearer SEKRIT.x", "sent Bearer ***"),
            ("client_secret:SEKRIT", "client_secret:***"),
            (r#"{"password": "SEKRIT"}"#, r#"{"password": "***"}"#),
            (
                "Proxy-Authorization: Basic U0VLUklU",
                "Proxy-Authorization: Basic ***",
            ),
        ] {
            assert_eq!(redact(text), shown, "{text}");
        }
    }

    /// A password: an upper-case letter, then letters, digits and the characters a URL's
    /// user-info may hold — `@`, `:` and `%` among them. Upper case appears nowhere else in the
    /// generated text, so any upper-case letter in the output is a leak.
    fn password() -> impl Strategy<Value = String> {
        ("[A-Z]", "[A-Z0-9@:%!$&*+,;=~._-]{0,24}").prop_map(|(first, rest)| first + &rest)
    }

    /// `password` as it appears in the URL: raw, or with `@`, `:` and `%` percent-encoded, or
    /// with every byte but the unreserved ones percent-encoded.
    fn written(password: &str, encoding: u8) -> String {
        let mut out = String::new();
        for c in password.chars() {
            let encode = match encoding {
                0 => false,
                1 => matches!(c, '@' | ':' | '%'),
                _ => !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')),
            };
            if encode {
                // Lower-case hex digits: an upper-case letter in the output is a leak.
                out.push_str(&format!("%{:02x}", c as u32));
            } else {
                out.push(c);
            }
        }
        out
    }

    fn host() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9-]{0,12}(\\.[a-z]{2,6}){0,2}",
            "(25[0-5]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|1[0-9][0-9]|[1-9]?[0-9])){3}",
            Just("[::1]".to_string()),
            Just("[2001:db8::7]".to_string()),
        ]
    }

    /// How many cases each property below runs.
    const CASES: u32 = 20_000;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(CASES))]

        /// In a URL with a password holding `@`, `:` and `%` (raw or percent-encoded), inside
        /// running text: no character of the password survives, the host does.
        #[test]
        fn no_password_survives_and_the_host_does(
            scheme in prop_oneof![
                Just("redis"), Just("rediss"), Just("https"), Just("http"),
                Just("upstash+https"), Just("redis+cluster"),
            ],
            user in proptest::option::of("[a-z][a-z0-9_]{0,8}"),
            password in password(),
            encoding in 0u8..3,
            host in host(),
            port in proptest::option::of(1u16..),
            path in "(/[a-z0-9@.]{0,8}){0,3}",
            query in proptest::option::of("[a-z]{1,5}=[a-z0-9@]{0,6}"),
            before in "[a-z ]{0,12}(`|\"| |)",
            after in "(`|\"| |)[a-z :]{0,12}",
        ) {
            let secret = written(&password, encoding);
            let userinfo = match &user {
                Some(user) => format!("{user}:{secret}"),
                None => format!(":{secret}"),
            };
            let authority = match port {
                Some(port) => format!("{host}:{port}"),
                None => host.clone(),
            };
            let query = query.map(|q| format!("?{q}")).unwrap_or_default();
            let url = format!("{scheme}://{userinfo}@{authority}{path}{query}");
            let text = format!("{before}{url}{after}");
            let shown = redact(&text);
            prop_assert!(
                !shown.chars().any(|c| c.is_ascii_uppercase()),
                "part of `{}` is in `{}`", password, shown
            );
            prop_assert!(!shown.contains(&secret), "`{}` is in `{}`", secret, shown);
            let kept = format!("{REDACTED}@{authority}{path}");
            prop_assert!(shown.contains(&kept), "`{}` is not in `{}`", kept, shown);
            if let Some(user) = &user {
                let user_kept = format!("://{user}:{REDACTED}@");
                prop_assert!(shown.contains(&user_kept), "`{}` not in `{}`", user_kept, shown);
            }
        }

        /// A secret setting's value never survives, quoted or not, whatever the key's case
        /// and spacing.
        #[test]
        fn no_setting_value_survives(
            key in prop_oneof![
                Just("token"), Just("_token"), Just("Password"), Just("PASSWD"),
                Just("api_key"), Just("client_secret"), Just("UPSTASH_REDIS_REST_TOKEN"),
                Just("Authorization"),
            ],
            separator in prop_oneof![Just("="), Just(":"), Just(" = "), Just("\":\""), Just("\": \"")],
            value in "[A-Z][A-Z0-9!$*+,;:=~._/@%-]{0,30}",
            quote in prop_oneof![Just(""), Just("\""), Just("'")],
            before in "[a-z ?&]{0,10}",
            after in "( |&|\n)[a-z=]{0,10}",
        ) {
            let (open, close) = if separator.ends_with('"') { ("", "\"") } else { (quote, quote) };
            let text = format!("{before}{key}{separator}{open}{value}{close}{after}");
            let shown = redact(&text);
            let upper_in_key = key.chars().filter(char::is_ascii_uppercase).count();
            prop_assert_eq!(
                shown.chars().filter(char::is_ascii_uppercase).count(),
                upper_in_key,
                "part of `{}` is in `{}`", value, shown
            );
        }
    }
}
