//! Requests into Redis commands: the JSON array and path forms, the allow-list, and the rewrite
//! of scripts that carry Upstash-only flags.

use std::cell::Cell;

use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde_json::Value as Json;

use crate::auth::{percent_decode, Access};
use crate::config::{Config, NEVER_ALLOWED, READ_ONLY_COMMANDS, SCRIPT_SUBCOMMANDS};

pub use crate::scripts::Scripts;

/// One command: its arguments as Redis receives them (the name first).
pub type Command = Vec<Vec<u8>>;

/// Why a request cannot become commands. Each becomes a JSON error with status 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The body is not JSON.
    #[error("ERR the request body is not valid JSON: {0}")]
    Json(String),
    /// The JSON has the wrong shape.
    #[error("ERR {0}")]
    Shape(String),
    /// The command is not on the allow-list (or not for this token).
    #[error("ERR command `{0}` is not allowed by this gateway")]
    NotAllowed(String),
}

/// Parses one command from a JSON array of strings, numbers and booleans, as a tree: the
/// reference [`from_json_text`] is checked against (its tests, the `gateway_command` fuzz
/// target).
pub fn from_json(json: &Json) -> Result<Command, CommandError> {
    let Json::Array(parts) = json else {
        return Err(CommandError::Shape(format!(
            "a command is a JSON array like [\"SET\", \"key\", \"value\"], got {}",
            kind(json)
        )));
    };
    if parts.is_empty() {
        return Err(CommandError::Shape("empty command array".into()));
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| match part {
            Json::String(s) => Ok(s.as_bytes().to_vec()),
            Json::Number(n) => Ok(n.to_string().into_bytes()),
            Json::Bool(b) => Ok(b.to_string().into_bytes()),
            other => Err(CommandError::Shape(format!(
                "argument {i} is {}; only strings, numbers and booleans are allowed",
                kind(other)
            ))),
        })
        .collect()
}

/// Parses one command from the JSON text of a request body, in one pass: straight into bytes,
/// without a [`Json`] tree.
///
/// It accepts exactly the bodies that parsing into [`Json`] and calling [`from_json`] accepts,
/// into the same command. A body with more than one thing wrong may be refused for another of
/// them: this reads in order and stops at the first.
pub fn from_json_text(body: &[u8]) -> Result<Command, CommandError> {
    let wrong = Wrong::default();
    parse_once(body, CommandSeed { wrong: &wrong }, &wrong)
}

/// Parses a list of commands from the JSON text of a `/pipeline` or `/multi-exec` body, in one
/// pass, and stops as soon as the list holds more than `max` commands: what follows is never
/// looked at.
///
/// It accepts exactly the bodies that parsing into [`Json`] and calling [`list_from_json`]
/// accepts, into the same commands; like [`from_json_text`], it refuses a body for the first
/// thing wrong in it.
pub fn list_from_json_text(body: &[u8], max: usize) -> Result<Vec<Command>, CommandError> {
    let wrong = Wrong::default();
    parse_once(body, ListSeed { max, wrong: &wrong }, &wrong)
}

/// The message of the first shape error the visitors below met: serde carries an error as text
/// only (with its position added), and a shape error's text is the gateway's own.
type Wrong = Cell<Option<String>>;

fn parse_once<'de, S: DeserializeSeed<'de>>(
    body: &'de [u8],
    seed: S,
    wrong: &Wrong,
) -> Result<S::Value, CommandError> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let parsed = seed
        .deserialize(&mut json)
        .and_then(|value| json.end().map(|()| value));
    parsed.map_err(|e| match wrong.take() {
        Some(message) => CommandError::Shape(message),
        None => CommandError::Json(e.to_string()),
    })
}

/// Notes `message` as the body's shape error and returns a serde error that stops the parse.
fn shape<E: serde::de::Error>(wrong: &Wrong, message: String) -> E {
    let error = E::custom(&message);
    wrong.set(Some(message));
    error
}

/// Implements the `visit_*` methods of a visitor that takes only arrays, each answering that
/// the value is not one: `$refuse(wrong, kind)`.
macro_rules! refuse_all_but_arrays {
    ($refuse:expr) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Err($refuse(self.wrong, "a boolean"))
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Err($refuse(self.wrong, "a number"))
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Err($refuse(self.wrong, "a number"))
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Err($refuse(self.wrong, "a number"))
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err($refuse(self.wrong, "a string"))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Err($refuse(self.wrong, "null"))
        }
        // Refused before its first entry is read: the parse stops here.
        fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err($refuse(self.wrong, "an object"))
        }
    };
}

/// A `/pipeline` or `/multi-exec` body: at most `max` commands.
struct ListSeed<'w> {
    max: usize,
    wrong: &'w Wrong,
}

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = Vec<Command>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Command>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_> {
    type Value = Vec<Command>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON array of command arrays")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Command>, A::Error> {
        let mut commands = Vec::new();
        loop {
            if commands.len() == self.max {
                // One more element would be one too many: refused before it is parsed.
                let beyond = seq.next_element_seed(Beyond {
                    max: self.max,
                    wrong: self.wrong,
                })?;
                debug_assert!(beyond.is_none(), "Beyond never parses");
                break;
            }
            match seq.next_element_seed(CommandSeed { wrong: self.wrong })? {
                Some(command) => commands.push(command),
                None => break,
            }
        }
        if commands.is_empty() {
            return Err(shape(self.wrong, "empty pipeline".into()));
        }
        Ok(commands)
    }

    refuse_all_but_arrays!(|wrong, kind| shape(
        wrong,
        format!("a pipeline is a JSON array of command arrays, got {kind}")
    ));
}

/// The element after the `max`-th of a pipeline: refused unread.
struct Beyond<'w> {
    max: usize,
    wrong: &'w Wrong,
}

impl<'de> DeserializeSeed<'de> for Beyond<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
        Err(shape(self.wrong, too_many(self.max)))
    }
}

/// The error for a pipeline longer than `max`.
fn too_many(max: usize) -> String {
    format!("pipeline exceeds the limit of {max} commands")
}

/// One command: a non-empty array of strings, numbers and booleans.
struct CommandSeed<'w> {
    wrong: &'w Wrong,
}

impl<'de> DeserializeSeed<'de> for CommandSeed<'_> {
    type Value = Command;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Command, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CommandSeed<'_> {
    type Value = Command;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a command: a JSON array of strings, numbers and booleans")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Command, A::Error> {
        let mut command = Vec::new();
        while let Some(arg) = seq.next_element_seed(ArgSeed {
            index: command.len(),
            wrong: self.wrong,
        })? {
            command.push(arg);
        }
        if command.is_empty() {
            return Err(shape(self.wrong, "empty command array".into()));
        }
        Ok(command)
    }

    refuse_all_but_arrays!(|wrong, kind| shape(
        wrong,
        format!("a command is a JSON array like [\"SET\", \"key\", \"value\"], got {kind}")
    ));
}

/// Argument `index` of a command: the bytes [`from_json`] would make of it.
struct ArgSeed<'w> {
    index: usize,
    wrong: &'w Wrong,
}

impl ArgSeed<'_> {
    fn refuse<E: serde::de::Error>(self, kind: &str) -> E {
        shape(
            self.wrong,
            format!(
                "argument {} is {kind}; only strings, numbers and booleans are allowed",
                self.index
            ),
        )
    }
}

impl<'de> DeserializeSeed<'de> for ArgSeed<'_> {
    type Value = Vec<u8>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ArgSeed<'_> {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string, number or boolean")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        Ok(v.as_bytes().to_vec())
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Vec<u8>, E> {
        Ok(v.into_bytes())
    }

    // Numbers go through `serde_json::Number` exactly as `Json` parsing does, so they print the
    // same.
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Vec<u8>, E> {
        Ok(serde_json::Number::from(v).to_string().into_bytes())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Vec<u8>, E> {
        Ok(serde_json::Number::from(v).to_string().into_bytes())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Vec<u8>, E> {
        match serde_json::Number::from_f64(v) {
            Some(n) => Ok(n.to_string().into_bytes()),
            None => Err(E::custom("not a finite number")),
        }
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Vec<u8>, E> {
        Ok(v.to_string().into_bytes())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<u8>, E> {
        Err(self.refuse("null"))
    }

    // Refused before its first element is read: a deeply nested argument costs nothing.
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Vec<u8>, A::Error> {
        Err(self.refuse("an array"))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Vec<u8>, A::Error> {
        Err(self.refuse("an object"))
    }
}

/// The body as JSON.
pub fn parse_json(body: &[u8]) -> Result<Json, CommandError> {
    serde_json::from_slice(body).map_err(|e| CommandError::Json(e.to_string()))
}

/// Parses a list of commands (the `/pipeline` and `/multi-exec` body) from a tree: the reference
/// [`list_from_json_text`] is checked against.
pub fn list_from_json(json: &Json, max: usize) -> Result<Vec<Command>, CommandError> {
    let Json::Array(commands) = json else {
        return Err(CommandError::Shape(format!(
            "a pipeline is a JSON array of command arrays, got {}",
            kind(json)
        )));
    };
    if commands.is_empty() {
        return Err(CommandError::Shape("empty pipeline".into()));
    }
    if commands.len() > max {
        return Err(CommandError::Shape(too_many(max)));
    }
    commands.iter().map(from_json).collect()
}

/// Parses the path form: `/set/foo/bar/EX/100`, with a POST body as the last argument.
pub fn from_path(path: &str, body: Option<&[u8]>) -> Result<Command, CommandError> {
    let mut parts: Command = path
        .trim_start_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| percent_decode(p).into_bytes())
        .collect();
    if parts.is_empty() {
        return Err(CommandError::Shape("no command in the path".into()));
    }
    if let Some(body) = body.filter(|b| !b.is_empty()) {
        parts.push(body.to_vec());
    }
    Ok(parts)
}

fn kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// The command's name, upper-cased.
pub fn name(command: &Command) -> String {
    String::from_utf8_lossy(&command[0]).to_ascii_uppercase()
}

/// Longest name [`Upper`] holds without allocating (no Redis command or subcommand is longer).
const NAME_BUFFER: usize = 32;

/// A name upper-cased as [`name`] does, on the stack when it is short and valid UTF-8.
pub(crate) enum Upper {
    Inline([u8; NAME_BUFFER], usize),
    Heap(String),
}

impl Upper {
    pub(crate) fn of(bytes: &[u8]) -> Upper {
        if bytes.len() <= NAME_BUFFER && std::str::from_utf8(bytes).is_ok() {
            let mut buffer = [0u8; NAME_BUFFER];
            buffer[..bytes.len()].copy_from_slice(bytes);
            buffer[..bytes.len()].make_ascii_uppercase();
            Upper::Inline(buffer, bytes.len())
        } else {
            Upper::Heap(String::from_utf8_lossy(bytes).to_ascii_uppercase())
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Valid UTF-8 upper-cased byte by byte in the ASCII range stays valid UTF-8.
            Upper::Inline(buffer, len) => std::str::from_utf8(&buffer[..*len]).unwrap_or(""),
            Upper::Heap(s) => s,
        }
    }
}

/// Checks the command against the allow-list and the token's access. `SCRIPT` is allowed with
/// the subcommands its entries name (`SCRIPT LOAD`), or with those of [`SCRIPT_SUBCOMMANDS`]
/// when the list names `SCRIPT` alone. A command of [`NEVER_ALLOWED`] is refused whatever the
/// list says.
pub fn check_allowed(
    command: &Command,
    config: &Config,
    access: Access,
) -> Result<(), CommandError> {
    let upper = Upper::of(&command[0]);
    let name = upper.as_str();
    let for_token = access == Access::Full || READ_ONLY_COMMANDS.contains(&name);
    if name == "SCRIPT" {
        let sub = Upper::of(command.get(1).map_or(&[][..], Vec::as_slice));
        let sub = sub.as_str();
        let allowed = (config.allowed.contains("SCRIPT") && SCRIPT_SUBCOMMANDS.contains(&sub))
            || config.allowed.contains(&format!("SCRIPT {sub}"));
        if !(allowed && for_token) {
            return Err(CommandError::NotAllowed(format!("SCRIPT {sub}")));
        }
        return Ok(());
    }
    let allowed = config.allowed.contains(name) && !NEVER_ALLOWED.contains(&name);
    if !(allowed && for_token) {
        return Err(CommandError::NotAllowed(name.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_arguments_may_be_strings_numbers_or_booleans() {
        let c = from_json(&json!(["SET", "k", 1, 2.5, true])).unwrap();
        assert_eq!(
            c,
            vec![
                b"SET".to_vec(),
                b"k".to_vec(),
                b"1".to_vec(),
                b"2.5".to_vec(),
                b"true".to_vec()
            ]
        );
        let err = from_json(&json!(["SET", {"a": 1}])).unwrap_err();
        assert!(err.to_string().contains("argument 1 is an object"), "{err}");
        assert!(from_json(&json!("GET")).is_err());
        assert!(from_json(&json!([])).is_err());
    }

    #[test]
    fn parsing_text_is_parsing_json_then_commands() {
        let bodies: &[&str] = &[
            r#"[["SET","k",1,2.5,true,false,-3,1e3,18446744073709551615,-9223372036854775808]]"#,
            r#"[["GET","a\"b\u00e9\n"],["PING"]]"#,
            r#" [ [ "EVALSHA" , "abc" , 0 ] ] "#,
            r#"[]"#,
            r#"[[]]"#,
            r#"[["GET","k"],[]]"#,
            r#"[["GET",null]]"#,
            r#"[["GET",{"a":1}]]"#,
            r#"[["GET",["x"]]]"#,
            r#"["GET"]"#,
            r#"{"a":1}"#,
            r#"[["GET","k"]"#,
            r#"[["GET","k"]] x"#,
            r#"[["GET",1e400]]"#,
            r#""#,
            r#"[["A"],["B"],["C"]]"#,
        ];
        for body in bodies {
            let tree = parse_json(body.as_bytes()).and_then(|j| list_from_json(&j, 2));
            let once = list_from_json_text(body.as_bytes(), 2);
            assert_eq!(once.as_ref().ok(), tree.as_ref().ok(), "{body}");
            assert_eq!(once.is_err(), tree.is_err(), "{body}");
            let one = body
                .trim()
                .strip_prefix('[')
                .and_then(|b| b.strip_suffix(']'));
            if let Some(one) = one {
                let tree = parse_json(one.as_bytes()).and_then(|j| from_json(&j));
                let once = from_json_text(one.as_bytes());
                assert_eq!(once.as_ref().ok(), tree.as_ref().ok(), "{one}");
                assert_eq!(once.is_err(), tree.is_err(), "{one}");
            }
        }
    }

    #[test]
    fn each_refusal_says_what_is_wrong() {
        let shape = |body: &str, max| match list_from_json_text(body.as_bytes(), max) {
            Err(CommandError::Shape(message)) => message,
            other => panic!("{body}: {other:?}"),
        };
        assert_eq!(shape("[]", 2), "empty pipeline");
        assert_eq!(shape("[[]]", 2), "empty command array");
        assert_eq!(
            shape(r#"{"a":1}"#, 2),
            "a pipeline is a JSON array of command arrays, got an object"
        );
        assert_eq!(
            shape(r#"["GET"]"#, 2),
            r#"a command is a JSON array like ["SET", "key", "value"], got a string"#
        );
        assert_eq!(
            shape(r#"[["GET",null]]"#, 2),
            "argument 1 is null; only strings, numbers and booleans are allowed"
        );
        assert_eq!(
            shape(r#"[["SET","k",{"v":1}]]"#, 2),
            "argument 2 is an object; only strings, numbers and booleans are allowed"
        );
        assert_eq!(
            shape(r#"[["A"],["B"],["C"]]"#, 2),
            "pipeline exceeds the limit of 2 commands"
        );
        // The tree says the same of a list too long and otherwise well formed.
        let json = parse_json(br#"[["A"],["B"],["C"]]"#).unwrap();
        assert_eq!(
            list_from_json(&json, 2),
            Err(CommandError::Shape(too_many(2)))
        );
        assert!(matches!(
            list_from_json_text(br#"[["GET","k"]"#, 2),
            Err(CommandError::Json(e)) if e.contains("EOF")
        ));
        assert!(matches!(
            from_json_text(br#"["GET","k"] x"#),
            Err(CommandError::Json(e)) if e.contains("trailing characters")
        ));
    }

    #[test]
    fn parsing_stops_at_the_command_past_the_limit() {
        // What follows the third command is never read: neither its syntax error nor its size.
        let mut body = br#"[["A"],["B"],["C"],"#.to_vec();
        body.extend_from_slice(&[b'!'; 10_000]);
        assert_eq!(
            list_from_json_text(&body, 2),
            Err(CommandError::Shape(too_many(2)))
        );
        // Exactly at the limit is fine.
        assert_eq!(
            list_from_json_text(br#"[["A"],["B"]]"#, 2).unwrap().len(),
            2
        );
        assert_eq!(
            list_from_json_text(br#"[["A"]]"#, 0),
            Err(CommandError::Shape(too_many(0)))
        );
    }

    #[test]
    fn nesting_inside_an_argument_is_refused_unread() {
        // serde_json's own depth limit would allow 128 levels: an argument may not be an array
        // at all, so the parse stops at the first.
        let mut nested = "[".repeat(100_000).into_bytes();
        nested.extend_from_slice("]".repeat(100_000).as_bytes());
        assert_eq!(
            from_json_text(&nested),
            Err(CommandError::Shape(
                "argument 0 is an array; only strings, numbers and booleans are allowed".into()
            ))
        );
        assert!(matches!(
            list_from_json_text(&nested, 1000),
            Err(CommandError::Shape(e)) if e.starts_with("argument 0 is an array")
        ));
    }

    fn allowed(names: &[&str]) -> Config {
        let mut config = Config::new(([127, 0, 0, 1], 0).into(), "redis://x/", "t");
        config.allowed = names.iter().map(|n| n.to_string()).collect();
        config
    }

    fn cmd(parts: &[&str]) -> Command {
        parts.iter().map(|p| p.as_bytes().to_vec()).collect()
    }

    #[test]
    fn script_subcommands_are_allowed_by_name_and_crossing_databases_never() {
        let config = allowed(&["SCRIPT LOAD", "GET", "SELECT", "FLUSHALL"]);
        let check = |parts: &[&str], access| check_allowed(&cmd(parts), &config, access);
        assert_eq!(check(&["script", "load", "return 1"], Access::Full), Ok(()));
        for refused in [
            &["SCRIPT", "FLUSH"][..],
            &["SCRIPT", "EXISTS", "x"],
            &["SCRIPT"],
        ] {
            assert!(check(refused, Access::Full).is_err(), "{refused:?}");
        }
        assert!(check(&["SCRIPT", "LOAD", "return 1"], Access::ReadOnly).is_err());
        assert_eq!(check(&["get", "k"], Access::ReadOnly), Ok(()));
        for never in ["SELECT", "select", "FLUSHALL"] {
            assert_eq!(
                check(&[never, "0"], Access::Full),
                Err(CommandError::NotAllowed(never.to_ascii_uppercase()))
            );
        }
        // `SCRIPT` alone allows LOAD and EXISTS.
        let config = allowed(&["SCRIPT"]);
        let check = |parts: &[&str]| check_allowed(&cmd(parts), &config, Access::Full);
        assert_eq!(check(&["SCRIPT", "EXISTS", "x"]), Ok(()));
        assert!(check(&["SCRIPT", "FLUSH"]).is_err());
    }

    #[test]
    fn path_form_takes_the_post_body_last() {
        let c = from_path("/set/foo/bar%20baz/EX/100", None).unwrap();
        assert_eq!(c[2], b"bar baz");
        let c = from_path("/set/foo", Some(b"value")).unwrap();
        assert_eq!(c, vec![b"set".to_vec(), b"foo".to_vec(), b"value".to_vec()]);
    }
}
