//! The reading of a request's path and host ([`normalize`]) against a real nginx: the origin a
//! rule must see a request as. nginx answers from a `location` per rule (and a `server` per host
//! rule); for every generated request, a rule matches our reading exactly when nginx serves the
//! request from that rule's location (or server), unless one of us refuses the request; and where
//! both read it, our reading, decoded, is nginx's `$uri` (and `$host`) byte for byte.
//!
//! The paths spell the rules' paths every way a client can — escapes of any character in either
//! case, doubled slashes, `.` and `..` segments, encoded slashes, backslashes, bad escapes, `;`
//! parameters, control characters, queries and fragments — beside random ones; seeded, so a
//! failure names its inputs.

mod common;

use edgelimit_engine::normalize;
use edgelimit_engine::rules::{HostPattern, PathMatch};
use edgelimit_testkit::http::KeepAlive;
use edgelimit_testkit::rng::Rng;
use edgelimit_testkit::task;

use common::nginx::Nginx;

/// How many paths are sent.
const PATHS: usize = 12_000;
/// How many host spellings are sent.
const HOSTS: usize = 2_000;
/// The connections requests are spread over.
const CONNECTIONS: usize = 4;

/// A rule of the test: its name (what nginx answers from its locations), the nginx `location`s
/// serving what the rule matches, the rule's path as the configuration writes it, and paths
/// (as nginx reads them, decoded) near and inside it.
struct PathRule {
    name: &'static str,
    locations: &'static [&'static str],
    rule: fn() -> PathMatch,
    near: &'static [&'static str],
}

const PATH_RULES: &[PathRule] = &[
    PathRule {
        name: "api",
        locations: &["location /api/"],
        rule: || PathMatch::prefix("/api/").unwrap(),
        near: &[
            "/api/",
            "/api/users/7",
            "/api/v1/x.json",
            "/api",
            "/apix/y",
            "/ap/i/",
        ],
    },
    PathRule {
        name: "admin",
        locations: &["location /admin"],
        rule: || PathMatch::prefix("/admin").unwrap(),
        near: &[
            "/admin",
            "/admin/",
            "/adminx",
            "/admin/users/1",
            "/Admin/",
            "/adm/in",
        ],
    },
    PathRule {
        name: "v1users",
        locations: &["location /v1/users/"],
        rule: || PathMatch::prefix("/v1/users/").unwrap(),
        near: &[
            "/v1/users/",
            "/v1/users/42",
            "/v1/users",
            "/v1/user/1",
            "/v1/users/a/b",
        ],
    },
    PathRule {
        name: "login",
        locations: &["location = /login", "location = /login/"],
        rule: || PathMatch::pattern("/login").unwrap(),
        near: &["/login", "/login/", "/login/x", "/loginx", "/log/in"],
    },
    PathRule {
        name: "posts",
        locations: &["location ~ ^/v2/users/[^/]+/posts/?$"],
        rule: || PathMatch::pattern("/v2/users/*/posts").unwrap(),
        near: &[
            "/v2/users/9/posts",
            "/v2/users/9/posts/",
            "/v2/users/9/posts/1",
            "/v2/users/posts",
            "/v2/users/a/b/posts",
        ],
    },
    PathRule {
        name: "static",
        locations: &["location ~ ^/static(/.*)?$"],
        rule: || PathMatch::pattern("/static/**").unwrap(),
        near: &[
            "/static",
            "/static/",
            "/static/css/a.css",
            "/staticx",
            "/static.css",
        ],
    },
    PathRule {
        name: "jobs",
        locations: &["location ~ ^/v1/jobs:cancel/?$"],
        rule: || PathMatch::pattern("/v1/jobs:cancel").unwrap(),
        near: &[
            "/v1/jobs:cancel",
            "/v1/jobs:cancel/",
            "/v1/jobs:cancelx",
            "/v1/jobs",
        ],
    },
    PathRule {
        name: "docs",
        locations: &["location \"/docs/read me/\""],
        rule: || PathMatch::prefix("/docs/read me/").unwrap(),
        near: &[
            "/docs/read me/",
            "/docs/read me/intro",
            "/docs/readme/",
            "/docs/read  me/",
        ],
    },
    PathRule {
        name: "cafe",
        locations: &["location /café/"],
        rule: || PathMatch::prefix("/caf%c3%a9/").unwrap(),
        near: &["/café/", "/café/menu", "/cafe/", "/caf/é/"],
    },
    PathRule {
        name: "cpp",
        locations: &["location /c++/"],
        rule: || PathMatch::prefix("/c++/").unwrap(),
        near: &["/c++/", "/c++/x", "/c+/", "/c+ /"],
    },
    PathRule {
        name: "percent",
        locations: &["location /100%/"],
        rule: || PathMatch::prefix("/100%25/").unwrap(),
        near: &["/100%/", "/100%/x", "/100/", "/100%25/"],
    },
    PathRule {
        name: "question",
        locations: &["location \"/what?/\""],
        rule: || PathMatch::prefix("/what%3F/").unwrap(),
        near: &["/what?/", "/what?/x", "/what/", "/what#/"],
    },
    PathRule {
        name: "at",
        locations: &["location /u/@me/"],
        rule: || PathMatch::prefix("/u/@me/").unwrap(),
        near: &["/u/@me/", "/u/@me/x", "/u/me/", "/u/@me"],
    },
    PathRule {
        name: "api2",
        locations: &["location /api2/"],
        // Written with an escape in the configuration: the same path.
        rule: || PathMatch::prefix("/a%70i2/").unwrap(),
        near: &["/api2/", "/api2/x", "/api2"],
    },
];

/// A host rule: its name (what nginx's `server` answers), nginx's `server_name`, the rule's host
/// as the configuration writes it, and host names near and inside it.
struct HostRule {
    name: &'static str,
    server_name: &'static str,
    rule: &'static str,
    near: &'static [&'static str],
}

const HOST_RULES: &[HostRule] = &[
    HostRule {
        name: "shop",
        server_name: "shop.example.org",
        rule: "Shop.Example.org.",
        near: &[
            "shop.example.org",
            "shop.example.org.evil",
            "xshop.example.org",
            "example.org",
        ],
    },
    HostRule {
        name: "sub",
        server_name: "*.example.com",
        rule: "*.example.com",
        near: &[
            "a.example.com",
            "a.b.example.com",
            "example.com",
            "aexample.com",
            "a_b.example.com",
        ],
    },
];

/// nginx's configuration: a default server answering `none`, with a location per path rule,
/// and a server per host rule. Every answer is `<name>\n$host\n$uri`.
fn servers() -> String {
    let answer = |name: &str| format!("{{ return 200 \"{name}\\n$host\\n$uri\"; }}");
    let mut config = format!(
        "server {{\n listen {{listen}} default_server;\n server_name _;\n location / {}\n",
        answer("none")
    );
    for rule in PATH_RULES {
        for location in rule.locations {
            config.push_str(&format!(" {location} {}\n", answer(rule.name)));
        }
    }
    config.push_str("}\n");
    for rule in HOST_RULES {
        config.push_str(&format!(
            "server {{\n listen {{listen}};\n server_name {};\n location / {}\n}}\n",
            rule.server_name,
            answer(rule.name)
        ));
    }
    config
}

/// What a random path is made of: the rules' segments, an empty one, dots, unreserved and reserved
/// characters, and what reads specially or must be escaped to be sent.
const PATH_PIECES: &[&str] = &[
    "", "api", "admin", "v1", "v2", "users", "login", "posts", "static", "cancel", "9", "x", "...",
    "a.b", ".", "..", "~", "-", "_", ":", "@", "+", "!", "$", "&", "'", "(", ")", "*", ",", "=",
    "%", "?", "#", ";", " ", "é", "\\", "\"", "<", "{", "|",
];

/// A raw escape of `byte`, in upper- or lower-case hex.
fn escaped(rng: &mut Rng, byte: u8) -> String {
    let text = format!("%{byte:02X}");
    if rng.chance(50) {
        text.to_lowercase()
    } else {
        text
    }
}

/// A spelling of `decoded` (the path nginx would read) as a client may send it: each character
/// escaped or not (a space, `%`, `?` and `#` always, as their literals mean something else),
/// `/` sometimes escaped, and now and then something odd slipped in.
fn spell(rng: &mut Rng, decoded: &str) -> String {
    let escape_rate = *rng.pick(&[0, 10, 30, 100]);
    let mut raw = String::new();
    for c in decoded.chars() {
        let must = matches!(c, ' ' | '%' | '?' | '#');
        if c == '/' {
            if rng.chance(3) {
                raw.push_str(&escaped(rng, b'/'));
            } else {
                raw.push('/');
            }
        } else if must || rng.chance(escape_rate) {
            let mut bytes = [0; 4];
            for &byte in c.encode_utf8(&mut bytes).as_bytes() {
                raw.push_str(&escaped(rng, byte));
            }
        } else {
            raw.push(c);
        }
        if rng.chance(4) {
            raw.push_str(rng.pick::<&str>(ODDITIES));
        }
    }
    if rng.chance(15) {
        raw.push_str(rng.pick::<&str>(&["?q=1", "?x=/../admin", "#frag", "?", "/.", "/..", "/"]));
    }
    raw
}

/// What a client slips into a path.
const ODDITIES: &[&str] = &[
    // Slashes and dot segments, plain and escaped.
    "/", "//", "/.", "/./", "/..", "/../", "/x/..", "/%2e", "/%2E%2e", "/.%2e",
    // Encoded slashes, backslashes, control characters: origins read them differently.
    "%2F", "%2f", "%5C", "\\", "%00", "%0a", "%7F",
    // Bad escapes, which nginx refuses, and double encodings.
    "%", "%4", "%zz", "%%", "%252F", "%2561",
    // Path parameters, queries and fragments, raw and escaped.
    ";", ";id=1", "%3B", "%3f", "%23", "#",
    // Escapes of a space, non-ASCII and unreserved characters.
    "%20", "%C3%A9", "é", "%61", "%41", "%7e",
];

/// A path near a rule's, changed at the segment level (a `.` or `x/..` pair inserted, a slash
/// doubled, a `..` above the root), then spelled.
fn near_path(rng: &mut Rng, decoded: &str) -> String {
    let mut segments: Vec<String> = decoded.split('/').skip(1).map(str::to_string).collect();
    for _ in 0..rng.range(0, 2) {
        let at = rng.range(0, segments.len() as u64) as usize;
        let inserted: &[&str] = match rng.range(0, 4) {
            0 => &["."],
            1 => &["x", ".."],
            2 => &[""],
            3 => &[".."],
            _ => &["x", "y", "..", ".."],
        };
        for (i, segment) in inserted.iter().enumerate() {
            segments.insert(at + i, segment.to_string());
        }
    }
    spell(rng, &format!("/{}", segments.join("/")))
}

/// A random path of pieces.
fn random_path(rng: &mut Rng) -> String {
    let mut decoded = String::new();
    for _ in 0..rng.range(0, 6) {
        decoded.push('/');
        for _ in 0..rng.range(1, 3) {
            decoded.push_str(rng.pick::<&str>(PATH_PIECES));
        }
    }
    if decoded.is_empty() || rng.chance(20) {
        decoded.push('/');
    }
    spell(rng, &decoded)
}

/// The paths sent: each rule's near paths many times over, then random ones.
fn paths(rng: &mut Rng) -> Vec<String> {
    let mut paths = Vec::with_capacity(PATHS);
    let near: Vec<&str> = PATH_RULES
        .iter()
        .flat_map(|r| r.near.iter().copied())
        .collect();
    while paths.len() < PATHS * 2 / 3 {
        let decoded = *rng.pick(&near);
        paths.push(near_path(rng, decoded));
    }
    while paths.len() < PATHS {
        paths.push(random_path(rng));
    }
    paths
}

/// A spelling of `name` as a client may send it in `Host`.
fn spell_host(rng: &mut Rng, name: &str) -> String {
    let mut raw: String = name
        .chars()
        .map(|c| {
            if rng.chance(30) {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    if rng.chance(20) {
        raw.insert_str(
            rng.range(0, raw.len() as u64) as usize,
            rng.pick::<&str>(&[".", "..", "/", "\\", "[", "%2e", "-", "_"]),
        );
    }
    if rng.chance(30) {
        raw.push('.');
    }
    if rng.chance(5) {
        raw.push('.');
    }
    if rng.chance(40) {
        raw.push_str(rng.pick::<&str>(&[":80", ":443", ":8080", ":", ":x", ":80:80", ":0"]));
    }
    raw
}

/// The host spellings sent.
fn hosts(rng: &mut Rng) -> Vec<String> {
    let mut names: Vec<&str> = HOST_RULES
        .iter()
        .flat_map(|r| r.near.iter().copied())
        .collect();
    names.extend([
        "localhost",
        "[::1]",
        "[::1]:8080",
        "[FE80::1]",
        "[::1",
        "127.0.0.1",
        ".",
        "",
    ]);
    (0..HOSTS)
        .map(|_| {
            let name = *rng.pick(&names);
            spell_host(rng, name)
        })
        .collect()
}

/// What nginx answered one request: refused (400), or the name it served it under, with its
/// `$host` and `$uri`.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Refused,
    Served {
        name: String,
        host: Vec<u8>,
        uri: Vec<u8>,
    },
    /// Another status: the test's nginx is not what it expects.
    Unexpected(String),
}

/// Sends each request (`(target, host)`) to nginx over a few keep-alive connections, and
/// returns its answers in order.
fn ask(nginx: &Nginx, requests: Vec<(String, String)>) -> Vec<Answer> {
    let addr = nginx.addr();
    let chunk = requests.len().div_ceil(CONNECTIONS);
    let batches: Vec<Vec<(String, String)>> = requests.chunks(chunk).map(<[_]>::to_vec).collect();
    let answers = task::runtime().block_on(task::join_all(batches.into_iter().map(|batch| {
        async move {
            let mut connection = KeepAlive::connect(addr).await;
            let mut answers = Vec::with_capacity(batch.len());
            for (target, host) in batch {
                let request = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n");
                let (status, body) = match connection.send(request.as_bytes()).await {
                    Ok(answer) => answer,
                    // nginx closes a connection after a 400: the next request goes on a new one.
                    Err(_) => {
                        connection = KeepAlive::connect(addr).await;
                        connection
                            .send(request.as_bytes())
                            .await
                            .unwrap_or_else(|e| panic!("nginx answers {target:?}: {e}"))
                    }
                };
                answers.push(match status {
                    400 => {
                        connection = KeepAlive::connect(addr).await;
                        Answer::Refused
                    }
                    200 => {
                        let mut parts = body.splitn(3, |&b| b == b'\n');
                        let mut part = || parts.next().unwrap_or_default().to_vec();
                        let name = String::from_utf8(part()).expect("a rule's name");
                        Answer::Served {
                            name,
                            host: part(),
                            uri: part(),
                        }
                    }
                    other => Answer::Unexpected(format!("{other} to {target:?} (Host: {host:?})")),
                });
            }
            answers
        }
    })));
    let answers: Vec<Answer> = answers.into_iter().flatten().collect();
    if let Some(Answer::Unexpected(what)) =
        answers.iter().find(|a| matches!(a, Answer::Unexpected(_)))
    {
        panic!("nginx answered {what}; its log:\n{}", nginx.error_log());
    }
    answers
}

/// `read` with every `%XX` decoded: the bytes nginx holds as `$uri` for it.
fn decoded(read: &str) -> Vec<u8> {
    let bytes = read.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("ASCII");
            out.push(u8::from_str_radix(hex, 16).expect("a reading's escapes are hex"));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// What a comparison counted.
#[derive(Debug, Default)]
struct Counts {
    sent: usize,
    refused_by_nginx: usize,
    /// Refused by us where nginx served the request (from a rule's location or elsewhere).
    refused_by_us: usize,
    /// Why we refused, by reason.
    refused_because: std::collections::BTreeMap<String, usize>,
    /// Refused by us where nginx served the request from a rule's location.
    refused_where_a_rule_served: usize,
    /// Matched by a rule while spelt otherwise than our reading of it.
    spellings_matched: usize,
    mismatches: Vec<String>,
}

#[test]
fn rules_match_the_paths_nginx_serves_them_from() {
    let nginx = Nginx::start(&servers());
    let mut rng = Rng::new(0x6e67_696e_785f_7061);
    let sent = paths(&mut rng);
    let requests = sent
        .iter()
        .map(|target| (target.clone(), "localhost".to_string()))
        .collect();
    let answers = ask(&nginx, requests);
    let rules: Vec<(&str, PathMatch)> = PATH_RULES.iter().map(|r| (r.name, (r.rule)())).collect();

    let mut counts = Counts {
        sent: sent.len(),
        ..Counts::default()
    };
    let mut served_by = std::collections::BTreeMap::<&str, usize>::new();
    for (target, answer) in sent.iter().zip(&answers) {
        // What a host hands the engine: the target's path, without its query.
        let path = target.split('?').next().unwrap_or_default();
        let ours = normalize::path(path);
        let Answer::Served { name, uri, .. } = answer else {
            counts.refused_by_nginx += 1;
            continue;
        };
        *served_by.entry(name.as_str()).or_default() += 1;
        let read = match ours {
            Ok(read) => read,
            Err(why) => {
                counts.refused_by_us += 1;
                *counts.refused_because.entry(why.to_string()).or_default() += 1;
                counts.refused_where_a_rule_served += usize::from(name != "none");
                continue;
            }
        };
        for (rule, path_match) in &rules {
            let matched = path_match.matches(&read);
            if matched != (name == rule) {
                counts.mismatches.push(format!(
                    "{target:?}: nginx served it from {name:?}; rule {rule:?} {} our reading {read:?}",
                    if matched { "matches" } else { "does not match" }
                ));
            }
            counts.spellings_matched += usize::from(matched && read != path);
        }
        if decoded(&read) != *uri {
            counts.mismatches.push(format!(
                "{target:?}: we read {read:?}, nginx {:?}",
                String::from_utf8_lossy(uri)
            ));
        }
    }

    println!("nginx differential, paths: {counts:#?}\nserved from: {served_by:?}");
    assert!(counts.sent >= 10_000 && answers.len() == counts.sent);
    assert!(
        counts.mismatches.is_empty(),
        "{} of {} paths read otherwise than nginx reads them; the first:\n{}",
        counts.mismatches.len(),
        counts.sent,
        counts.mismatches[..counts.mismatches.len().min(20)].join("\n")
    );
    // The paths reached every rule, and reached some of them spelt otherwise than read; both
    // sides refused some: the comparison had something to compare.
    for rule in PATH_RULES {
        let served = served_by.get(rule.name).copied().unwrap_or(0);
        assert!(
            served >= 30,
            "nginx served only {served} paths from {}",
            rule.name
        );
    }
    assert!(counts.spellings_matched >= 1_000, "{counts:?}");
    assert!(
        counts.refused_by_nginx >= 100 && counts.refused_by_us >= 100,
        "{counts:?}"
    );
}

#[test]
fn rules_match_the_hosts_nginx_serves_them_from() {
    let nginx = Nginx::start(&servers());
    let mut rng = Rng::new(0x6e67_696e_785f_686f);
    let sent = hosts(&mut rng);
    let requests = sent
        .iter()
        .map(|host| ("/".to_string(), host.clone()))
        .collect();
    let answers = ask(&nginx, requests);
    let rules: Vec<(&str, HostPattern)> = HOST_RULES
        .iter()
        .map(|r| (r.name, HostPattern::parse(r.rule).unwrap()))
        .collect();

    let mut counts = Counts {
        sent: sent.len(),
        ..Counts::default()
    };
    let mut served_by = std::collections::BTreeMap::<&str, usize>::new();
    for (raw, answer) in sent.iter().zip(&answers) {
        let ours = normalize::host(raw);
        let Answer::Served { name, host, .. } = answer else {
            counts.refused_by_nginx += 1;
            continue;
        };
        *served_by.entry(name.as_str()).or_default() += 1;
        let read = match ours {
            Ok(read) => read,
            Err(why) => {
                counts.refused_by_us += 1;
                *counts.refused_because.entry(why.to_string()).or_default() += 1;
                counts.refused_where_a_rule_served += usize::from(name != "none");
                continue;
            }
        };
        for (rule, pattern) in &rules {
            let matched = pattern.matches(&read);
            if matched != (name == rule) {
                counts.mismatches.push(format!(
                    "Host {raw:?}: nginx served it from {name:?}; rule {rule:?} {} our reading {read:?}",
                    if matched { "matches" } else { "does not match" }
                ));
            }
            counts.spellings_matched += usize::from(matched && read != raw.as_str());
        }
        // nginx's `$host` is the server's name when the request names none.
        if !read.is_empty() && read.as_bytes() != host.as_slice() {
            counts.mismatches.push(format!(
                "Host {raw:?}: we read {read:?}, nginx {:?}",
                String::from_utf8_lossy(host)
            ));
        }
    }

    println!("nginx differential, hosts: {counts:#?}\nserved from: {served_by:?}");
    assert!(
        counts.mismatches.is_empty(),
        "{} of {} hosts read otherwise than nginx reads them; the first:\n{}",
        counts.mismatches.len(),
        counts.sent,
        counts.mismatches[..counts.mismatches.len().min(20)].join("\n")
    );
    for rule in HOST_RULES {
        let served = served_by.get(rule.name).copied().unwrap_or(0);
        assert!(
            served >= 50,
            "nginx served only {served} hosts from {}",
            rule.name
        );
    }
    assert!(counts.spellings_matched >= 100, "{counts:?}");
    assert!(
        counts.refused_by_nginx >= 20 && counts.refused_by_us >= 20,
        "{counts:?}"
    );
}
