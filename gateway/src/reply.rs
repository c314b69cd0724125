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

#[cfg(test)]
mod tests {
    use super::*;

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
