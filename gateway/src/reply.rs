//! Redis replies into Upstash REST JSON: `{"result": …}` or `{"error": "…"}`, with strings
//! base64-encoded when the client asked for `Upstash-Encoding: base64`.

use base64::Engine as _;
use redis::Value;
use serde_json::{json, Value as Json};

/// Whether strings in results are base64 (the `Upstash-Encoding: base64` request header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Strings as they are (bytes that are not UTF-8 are replaced).
    Plain,
    /// Every string base64, except the status `OK`, which clients recognise as is.
    Base64,
}

/// A Redis error as Upstash reports it: the server's text verbatim, e.g.
/// `NOSCRIPT No matching script. Please use EVAL.` (clients match on such prefixes).
pub fn error_text(error: &redis::ServerError) -> String {
    match error.details() {
        Some(details) => format!("{} {details}", error.code()),
        None => error.code().to_string(),
    }
}

/// One command's entry: `{"result": …}` or `{"error": "…"}`; errors are never encoded.
pub fn entry(value: &Value, encoding: Encoding) -> Json {
    match value {
        Value::ServerError(e) => json!({ "error": error_text(e) }),
        other => json!({ "result": result(other, encoding) }),
    }
}

fn string(bytes: &[u8], encoding: Encoding) -> Json {
    match encoding {
        Encoding::Plain => Json::String(String::from_utf8_lossy(bytes).into_owned()),
        Encoding::Base64 => Json::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
    }
}

/// A reply's `result`: null, integer, string or nested array.
pub fn result(value: &Value, encoding: Encoding) -> Json {
    match value {
        Value::Nil => Json::Null,
        Value::Int(n) => json!(n),
        Value::Okay => Json::String("OK".into()),
        Value::SimpleString(s) if s == "OK" => Json::String("OK".into()),
        Value::SimpleString(s) => string(s.as_bytes(), encoding),
        Value::BulkString(b) => string(b, encoding),
        Value::VerbatimString { text, .. } => string(text.as_bytes(), encoding),
        Value::Array(items) | Value::Set(items) => {
            Json::Array(items.iter().map(|v| result(v, encoding)).collect())
        }
        Value::Map(pairs) => Json::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [result(k, encoding), result(v, encoding)])
                .collect(),
        ),
        Value::Double(d) => string(d.to_string().as_bytes(), encoding),
        Value::Boolean(b) => json!(if *b { 1 } else { 0 }),
        Value::ServerError(e) => string(error_text(e).as_bytes(), encoding),
        Value::Attribute { data, .. } => result(data, encoding),
        // RESP3-only shapes that RESP2 (which the gateway speaks) never produces.
        other => string(format!("{other:?}").as_bytes(), encoding),
    }
}

/// Appends [`entry`]'s JSON text to `out`, byte for byte what serializing [`entry`] gives,
/// without building the [`Json`] tree.
pub fn write_entry(out: &mut Vec<u8>, value: &Value, encoding: Encoding) {
    match value {
        Value::ServerError(e) => write_error(out, &error_text(e)),
        other => {
            out.extend_from_slice(b"{\"result\":");
            write_result(out, other, encoding);
            out.push(b'}');
        }
    }
}

/// Appends `{"error":"…"}` to `out`, as serializing `json!({ "error": message })` does.
pub fn write_error(out: &mut Vec<u8>, message: &str) {
    out.extend_from_slice(b"{\"error\":");
    write_str(out, message);
    out.push(b'}');
}

/// Appends `[a,b,…]` to `out`, each item written by `write`: the array of a `/pipeline` or
/// `/multi-exec` answer, and of every array result.
pub fn write_array<T>(
    out: &mut Vec<u8>,
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut Vec<u8>, T),
) {
    out.push(b'[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(out, item);
    }
    out.push(b']');
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    // serde_json's own string escaping; writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn write_string(out: &mut Vec<u8>, bytes: &[u8], encoding: Encoding) {
    match encoding {
        Encoding::Plain => write_str(out, &String::from_utf8_lossy(bytes)),
        Encoding::Base64 => {
            // Base64 needs no escaping.
            out.push(b'"');
            let start = out.len();
            let len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
            out.resize(start + len, 0);
            match base64::engine::general_purpose::STANDARD.encode_slice(bytes, &mut out[start..]) {
                Ok(written) => out.truncate(start + written),
                Err(_) => {
                    out.truncate(start);
                    out.extend_from_slice(
                        base64::engine::general_purpose::STANDARD
                            .encode(bytes)
                            .as_bytes(),
                    );
                }
            }
            out.push(b'"');
        }
    }
}

/// Appends [`result`]'s JSON text to `out`.
pub fn write_result(out: &mut Vec<u8>, value: &Value, encoding: Encoding) {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::Int(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::Okay => out.extend_from_slice(b"\"OK\""),
        Value::SimpleString(s) if s == "OK" => out.extend_from_slice(b"\"OK\""),
        Value::SimpleString(s) => write_string(out, s.as_bytes(), encoding),
        Value::BulkString(b) => write_string(out, b, encoding),
        Value::VerbatimString { text, .. } => write_string(out, text.as_bytes(), encoding),
        Value::Array(items) | Value::Set(items) => {
            write_array(out, items, |out, v| write_result(out, v, encoding))
        }
        // A map is its keys and values in turn, flat.
        Value::Map(pairs) => write_array(out, pairs.iter().flat_map(|(k, v)| [k, v]), |out, v| {
            write_result(out, v, encoding)
        }),
        Value::Attribute { data, .. } => write_result(out, data, encoding),
        // Rare shapes: exactly as `result` makes them.
        other => {
            let _ = serde_json::to_writer(&mut *out, &result(other, encoding));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Value> {
        vec![
            Value::Nil,
            Value::Int(0),
            Value::Int(-42),
            Value::Int(i64::MAX),
            Value::Okay,
            Value::SimpleString("OK".into()),
            Value::SimpleString("PONG".into()),
            Value::SimpleString("quote \" back\\slash\n tab\t \u{1} é 😀".into()),
            Value::BulkString(Vec::new()),
            Value::BulkString(b"hi".to_vec()),
            Value::BulkString(vec![0, 255, 128, b'"', b'\\', 10]),
            Value::BulkString((0..=255).collect()),
            Value::Double(1.5),
            Value::Double(-0.0),
            Value::Boolean(true),
            Value::Boolean(false),
            redis::parse_redis_value(b"-NOSCRIPT No matching script. \"x\"\r\n").unwrap(),
            redis::parse_redis_value(b"-MYERR\r\n").unwrap(),
            redis::parse_redis_value(b"*2\r\n-ERR inner\r\n:3\r\n").unwrap(),
            Value::Array(vec![]),
            Value::Array(vec![
                Value::Int(1),
                Value::BulkString(b"a\"b".to_vec()),
                Value::Array(vec![Value::Nil, Value::Okay]),
            ]),
            Value::Set(vec![Value::BulkString(b"s".to_vec())]),
            Value::Map(vec![
                (Value::BulkString(b"k".to_vec()), Value::Int(7)),
                (Value::SimpleString("k2".into()), Value::Nil),
            ]),
        ]
    }

    #[test]
    fn written_entries_are_the_serialized_json() {
        for value in samples() {
            for encoding in [Encoding::Plain, Encoding::Base64] {
                let mut out = Vec::new();
                write_entry(&mut out, &value, encoding);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    serde_json::to_string(&entry(&value, encoding)).unwrap(),
                    "{value:?} {encoding:?}"
                );
            }
        }
        for message in ["ERR not run", "ERR \"quoted\" \\ \n é"] {
            let mut out = Vec::new();
            write_error(&mut out, message);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&json!({ "error": message })).unwrap()
            );
        }
    }

    #[test]
    fn base64_encodes_every_string_but_ok() {
        let v = Value::Array(vec![
            Value::BulkString(b"hi".to_vec()),
            Value::Okay,
            Value::SimpleString("PONG".into()),
            Value::Int(3),
            Value::Nil,
        ]);
        assert_eq!(
            result(&v, Encoding::Base64),
            json!(["aGk=", "OK", "UE9ORw==", 3, null])
        );
        assert_eq!(
            result(&v, Encoding::Plain),
            json!(["hi", "OK", "PONG", 3, null])
        );
    }
}
