//! The gateway's request bodies (`edgelimit_gateway::command`): a single command, a pipeline or
//! transaction list, and the path form — then the allow-list and the script rewrite on whatever
//! parsed. The one-pass parsers that skip the JSON tree must accept exactly the bodies the tree
//! parsers accept, into the same commands (as their docs promise; they may refuse a body for
//! another of its faults, having stopped at the first), and percent-decoding must match RFC
//! 3986's rule. The first byte chooses the form (and the pipeline limit).
#![no_main]

use edgelimit_gateway::auth::{percent_decode, Access};
use edgelimit_gateway::command::{
    check_allowed, from_json, from_json_text, from_path, list_from_json, list_from_json_text, name,
    parse_json, Command, Scripts,
};
use edgelimit_gateway::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let commands: Vec<Command> = match mode % 4 {
        0 => {
            let fast = from_json_text(body);
            let tree = parse_json(body).and_then(|json| from_json(&json));
            assert_eq!(
                fast.as_ref().ok(),
                tree.as_ref().ok(),
                "single command: fast and tree parsers differ"
            );
            fast.into_iter().collect()
        }
        1 | 2 => {
            let max = if mode % 4 == 1 {
                1000
            } else {
                usize::from(mode >> 2)
            };
            let fast = list_from_json_text(body, max);
            let tree = parse_json(body).and_then(|json| list_from_json(&json, max));
            assert_eq!(
                fast.as_ref().ok(),
                tree.as_ref().ok(),
                "pipeline: fast and tree parsers differ"
            );
            if let Ok(list) = &fast {
                assert!(!list.is_empty() && list.len() <= max);
            }
            fast.unwrap_or_default()
        }
        _ => {
            // The path, then after the first NUL the POST body.
            let (path, post) = match body.iter().position(|&b| b == 0) {
                Some(at) => (&body[..at], Some(&body[at + 1..])),
                None => (body, None),
            };
            let path = String::from_utf8_lossy(path);
            for segment in path.split('/') {
                assert_eq!(
                    percent_decode(segment),
                    reference_decode(segment),
                    "{segment:?}"
                );
            }
            from_path(&path, post).into_iter().collect()
        }
    };
    let config = Config::new(([127, 0, 0, 1], 0).into(), "redis://127.0.0.1/", "t");
    let scripts = Scripts::default();
    for mut command in commands {
        assert!(!command.is_empty(), "a parsed command has a name");
        name(&command);
        for access in [Access::Full, Access::ReadOnly] {
            let _ = check_allowed(&command, &config, access);
        }
        scripts.rewrite(&mut command);
    }
});

/// `%XX` with two hex digits is that byte, `+` a space, anything else itself.
fn reference_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
