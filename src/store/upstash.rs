//! The Upstash REST protocol's `/pipeline`, both ways and with no transport: the request body
//! that runs scripts (`EVALSHA`, `EVAL`) or plain commands, and the answer read into one
//! [`Reply`] per command. [`super::RestStore`] sends these over `reqwest`; any other transport
//! (a JavaScript `fetch`) can send the same bytes and read the same answers.

use std::future::Future;

use base64::Engine as _;
use serde_json::Value as Json;

use super::check::{Check, TimeSource, Verdict};
use super::error::StoreError;
use crate::script::{is_noscript, CheckPlan, Invocation, Reply, Topology};

/// The environment variable holding the REST URL (Upstash's own name).
pub const REST_URL_VAR: &str = "UPSTASH_REDIS_REST_URL";
/// The environment variable holding the REST token (Upstash's own name).
pub const REST_TOKEN_VAR: &str = "UPSTASH_REDIS_REST_TOKEN";

/// Reads a `/pipeline` answer — the HTTP status and the body text — into one reply per command,
/// expecting `commands` of them. Pure, so what a server (or an attacker between us and it) may
/// send can be tested and fuzzed without a network: every answer is a reply list or a
/// [`StoreError`] saying whether to retry, never a panic.
pub fn decode_pipeline(status: u16, text: &str, commands: usize) -> Result<Vec<Reply>, StoreError> {
    let message = || {
        serde_json::from_str::<Json>(text)
            .ok()
            .and_then(|j| j.get("error").and_then(Json::as_str).map(str::to_string))
            .unwrap_or_else(|| text.chars().take(200).collect())
    };
    // As HTTP names a status (`500 Internal Server Error`), when it knows the code.
    let shown = || {
        http::StatusCode::from_u16(status)
            .map(|s| s.to_string())
            .unwrap_or_else(|_| status.to_string())
    };
    if status != 200 {
        return Err(refused_pipeline(status, &message(), shown()));
    }
    let entries: Vec<PipelineEntry> = serde_json::from_str(text)
        .map_err(|e| StoreError::Protocol(format!("the pipeline answer cannot be read: {e}")))?;
    if entries.len() != commands {
        return Err(StoreError::Protocol(format!(
            "pipeline of {commands} commands answered {} entries",
            entries.len()
        )));
    }
    Ok(entries.into_iter().map(|e| e.0).collect())
}

/// The error of a `/pipeline` answered with `status` (not 200) and `message`: a Redis error code
/// the message opens with decides as it would in an entry ([`StoreError::from_error_reply`]: a
/// `WRONGPASS` is refused credentials whatever the status), else the status: 401 and 403
/// refused credentials, 429 a quota, 5xx an outage, anything else an answer we cannot read.
fn refused_pipeline(status: u16, message: &str, shown: String) -> StoreError {
    let coded = StoreError::from_error_code(message, format!("HTTP {shown}: {message}"));
    if !matches!(coded, StoreError::Script(_)) {
        return coded;
    }
    match status {
        401 | 403 => StoreError::Auth(message.to_string()),
        429 => StoreError::OverQuota(format!("HTTP {shown}: {message}")),
        500..=599 => StoreError::Unreachable(format!("HTTP {shown}: {message}")),
        _ => StoreError::Protocol(format!("HTTP {shown}: {message}")),
    }
}

/// The body of the `/pipeline` request that runs `invocations` by `EVALSHA`, as
/// [`super::RestStore`] sends it first (pure: the Worker's CPU benchmark times it under wasm32).
pub fn evalsha_pipeline_body(invocations: &[&Invocation]) -> Result<Vec<u8>, StoreError> {
    pipeline_body(invocations, |_, i| ("EVALSHA", i.script.sha1()))
}

/// The body of the `/pipeline` request that runs `invocations` by `EVAL` and their sources, as
/// [`super::RestStore`] resends those a fresh Redis answered `NOSCRIPT`.
pub(crate) fn eval_pipeline_body(invocations: &[&Invocation]) -> Result<Vec<u8>, StoreError> {
    pipeline_body(invocations, |_, i| ("EVAL", i.script.source()))
}

/// The body of an ordered batch's first `/pipeline`: `EVALSHA`, but `EVAL` and the source for
/// the calls [`sent_with_source`] picks.
fn ordered_pipeline_body(
    invocations: &[&Invocation],
    loaded: &LoadedScripts,
) -> Result<Vec<u8>, StoreError> {
    let with_source = sent_with_source(invocations, Some(loaded));
    pipeline_body(invocations, |n, i| {
        if with_source[n] {
            ("EVAL", i.script.source())
        } else {
            ("EVALSHA", i.script.sha1())
        }
    })
}

/// Which calls of an ordered batch go with their script's source (`EVAL`) rather than its SHA:
/// the first call of each script not known to be `loaded` (`None`: nothing is known) that has
/// calls after it. A `NOSCRIPT` answer there would leave that call to a second round trip while
/// the calls after it had already run: a batch whose later checks read what earlier ones wrote
/// (a lease credited, then spent) would run out of order.
pub(crate) fn sent_with_source(
    invocations: &[&Invocation],
    loaded: Option<&LoadedScripts>,
) -> Vec<bool> {
    let known = loaded.map(LoadedScripts::known).unwrap_or_default();
    let last = invocations.len().saturating_sub(1);
    let mut sending: Vec<&str> = Vec::new();
    invocations
        .iter()
        .enumerate()
        .map(|(n, i)| {
            let sha = i.script.sha1();
            let send = n < last && !known.iter().any(|k| k == sha) && !sending.contains(&sha);
            if send {
                sending.push(sha);
            }
            send
        })
        .collect()
}

/// The scripts a store has seen run on its Redis: their first call in a batch is sent by SHA
/// alone from then on. Forgotten when Redis answers `NOSCRIPT` (restarted or flushed).
#[derive(Debug, Default)]
pub struct LoadedScripts(std::sync::Mutex<Vec<String>>);

impl LoadedScripts {
    pub(crate) fn known(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn note(&self, invocations: &[&Invocation], replies: &[Reply]) {
        let mut known = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for (invocation, reply) in invocations.iter().zip(replies) {
            let sha = invocation.script.sha1();
            let missing = matches!(reply, Reply::Error(m) if is_noscript(m));
            let at = known.iter().position(|k| k == sha);
            match (missing, at) {
                (true, Some(at)) => {
                    known.swap_remove(at);
                }
                (false, None) => known.push(sha.to_string()),
                _ => {}
            }
        }
    }
}

/// `[[verb, script, <number of keys>, "<key>", …, "<arg>", …], …]`: each invocation as the JSON
/// array the protocol carries, written straight from its keys and arguments into one buffer
/// sized for them — byte for byte what `serde_json` makes of the same arrays of strings, each
/// string escaped by `serde_json` itself.
fn pipeline_body<'i>(
    invocations: &[&'i Invocation],
    mut verb_and_script: impl FnMut(usize, &'i Invocation) -> (&'static str, &'i str),
) -> Result<Vec<u8>, StoreError> {
    let calls: Vec<(&str, &str)> = invocations
        .iter()
        .enumerate()
        .map(|(n, i)| verb_and_script(n, i))
        .collect();
    // Every part with its quotes and comma; room for a few escapes besides.
    let room: usize = invocations
        .iter()
        .zip(&calls)
        .map(|(i, (verb, script))| {
            let parts = i.keys().len() + i.args().len();
            let text = verb.len() + script.len() + i.text_len();
            8 + 20 + text + text / 8 + 3 * parts
        })
        .sum();
    let mut body = Vec::with_capacity(2 + room);
    body.push(b'[');
    for (n, (&invocation, (verb, script))) in invocations.iter().zip(&calls).enumerate() {
        if n > 0 {
            body.push(b',');
        }
        body.push(b'[');
        json_string(&mut body, verb)?;
        body.push(b',');
        json_string(&mut body, script)?;
        body.push(b',');
        let keys = invocation.keys();
        body.extend_from_slice(itoa::Buffer::new().format(keys.len()).as_bytes());
        for part in keys.iter().chain(invocation.args()) {
            body.push(b',');
            json_string(&mut body, part)?;
        }
        body.push(b']');
    }
    body.push(b']');
    Ok(body)
}

/// Appends `text` as a JSON string, escaped as `serde_json` escapes it (by `serde_json`: no
/// second escaper to keep in step).
fn json_string(body: &mut Vec<u8>, text: &str) -> Result<(), StoreError> {
    serde_json::to_writer(body, text)
        .map_err(|e| StoreError::Protocol(format!("cannot encode the pipeline: {e}")))
}

/// `{"result": …}` or `{"error": "…"}` into a transport-neutral reply.
/// One entry of a `/pipeline` answer, `{"result": …}` or `{"error": "…"}`, read straight into
/// its [`Reply`]: a JSON tree first would be an allocation per object, key and value, on every
/// request the Worker makes.
struct PipelineEntry(Reply);

/// The keys of an entry that mean something; any other is skipped.
#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum EntryField {
    Result,
    Error,
    #[serde(other)]
    Other,
}

impl<'de> serde::Deserialize<'de> for PipelineEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = PipelineEntry;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a pipeline entry, an object with `result` or `error`")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let (mut result, mut error) = (None, None);
                while let Some(field) = map.next_key::<EntryField>()? {
                    match field {
                        EntryField::Result => result = Some(map.next_value::<ResultValue>()?.0),
                        // Only a string says what went wrong; anything else is still an error.
                        EntryField::Error => {
                            let value: Json = map.next_value()?;
                            error = Some(value.as_str().unwrap_or("ERR").to_string());
                        }
                        EntryField::Other => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                // An error wins, wherever it stands.
                match (error, result) {
                    (Some(message), _) => Ok(PipelineEntry(Reply::Error(message))),
                    (None, Some(reply)) => Ok(PipelineEntry(reply)),
                    (None, None) => Err(serde::de::Error::custom(
                        "a pipeline entry has neither result nor error",
                    )),
                }
            }
        }
        d.deserialize_map(Entry)
    }
}

/// A `result`: null, an integer, a base64 string (the status `OK` as it is), or an array of these.
struct ResultValue(Reply);

impl<'de> serde::Deserialize<'de> for ResultValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Value;
        impl<'de> serde::de::Visitor<'de> for Value {
            type Value = ResultValue;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("null, an integer, a base64 string or an array of these")
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<ResultValue, E> {
                Ok(ResultValue(Reply::Nil))
            }

            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ResultValue, E> {
                Ok(ResultValue(Reply::Int(n)))
            }

            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ResultValue, E> {
                i64::try_from(n)
                    .map(|n| ResultValue(Reply::Int(n)))
                    .map_err(|_| E::custom(format!("not an integer: {n}")))
            }

            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<ResultValue, E> {
                Err(E::custom(format!("not an integer: {n}")))
            }

            // Base64 was asked for: every string is encoded except the status "OK".
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ResultValue, E> {
                if s == "OK" {
                    return Ok(ResultValue(Reply::Bulk(b"OK".to_vec())));
                }
                base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map(|bytes| ResultValue(Reply::Bulk(bytes)))
                    .map_err(|e| E::custom(format!("a result is not base64 ({e}): {s}")))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ResultValue, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(ResultValue(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(ResultValue(Reply::Array(items)))
            }
        }
        d.deserialize_any(Value)
    }
}

/// The `/pipeline` body of one plain command: `[["GET", "key"]]`.
#[cfg(feature = "rest")]
pub(crate) fn plain_pipeline_body(parts: &[String]) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(&[parts])
        .map_err(|e| StoreError::Protocol(format!("cannot encode the pipeline: {e}")))
}

/// Runs `invocations` as [`super::RestStore`] does, over any transport: one `/pipeline` by
/// `EVALSHA` (the first call of a script `loaded` does not know yet, with calls after it, by
/// `EVAL`: the batch runs in order), then those a fresh Redis answered `NOSCRIPT` by `EVAL` in
/// one more, each pipeline sent once more after a transient failure when `idempotent`. `post(body, commands)` sends one
/// `/pipeline` and reads one reply per command (`reqwest` natively, JavaScript's `fetch` in the
/// npm package). One reply per invocation, in order.
pub async fn run_scripts<P, F>(
    post: P,
    invocations: &[&Invocation],
    idempotent: bool,
    loaded: &LoadedScripts,
) -> Result<Vec<Reply>, StoreError>
where
    P: Fn(Vec<u8>, usize) -> F,
    F: Future<Output = Result<Vec<Reply>, StoreError>>,
{
    if invocations.is_empty() {
        return Ok(Vec::new());
    }
    let body = ordered_pipeline_body(invocations, loaded)?;
    let mut replies = post_resent_if(&post, idempotent, body, invocations.len()).await?;
    loaded.note(invocations, &replies);
    let missing: Vec<usize> = replies
        .iter()
        .enumerate()
        .filter_map(|(i, r)| matches!(r, Reply::Error(m) if is_noscript(m)).then_some(i))
        .collect();
    if !missing.is_empty() {
        let resend: Vec<&Invocation> = missing.iter().map(|&i| invocations[i]).collect();
        let body = eval_pipeline_body(&resend)?;
        let resent = post_resent_if(&post, idempotent, body, resend.len()).await?;
        for (i, reply) in missing.into_iter().zip(resent) {
            replies[i] = reply;
        }
    }
    Ok(replies)
}

/// Decides `checks` as [`super::RestStore`] does, over any transport: each planned for one node
/// under `namespace` (assignments read by the scripts), their calls run by [`run_scripts`] in one
/// `/pipeline` (resent after a lost answer only when every check is idempotent: a repeat then
/// charges nothing twice), one verdict per check.
pub async fn check_by_scripts<P, F>(
    post: P,
    checks: &[Check],
    time: TimeSource,
    namespace: &str,
    loaded: &LoadedScripts,
) -> Result<Vec<Verdict>, StoreError>
where
    P: Fn(Vec<u8>, usize) -> F,
    F: Future<Output = Result<Vec<Reply>, StoreError>>,
{
    let plans = checks
        .iter()
        .map(|c| CheckPlan::controlled(c, namespace, time, Topology::SingleNode))
        .collect::<Result<Vec<_>, _>>()?;
    let invocations: Vec<&Invocation> = plans.iter().flat_map(|p| p.invocations()).collect();
    let idempotent = checks.iter().all(Check::is_idempotent);
    let mut replies = run_scripts(post, &invocations, idempotent, loaded)
        .await?
        .into_iter();
    plans
        .iter()
        .map(|plan| {
            let mine: Vec<Reply> = replies.by_ref().take(plan.invocations().len()).collect();
            plan.verdict(&mine)
        })
        .collect()
}

/// `post(body, commands)`, sent once more after a transient failure when `idempotent` (a lost
/// answer may have run: only a batch whose repeat charges nothing twice is resent).
pub(crate) async fn post_resent_if<P, F>(
    post: &P,
    idempotent: bool,
    body: Vec<u8>,
    n: usize,
) -> Result<Vec<Reply>, StoreError>
where
    P: Fn(Vec<u8>, usize) -> F,
    F: Future<Output = Result<Vec<Reply>, StoreError>>,
{
    let resend = idempotent.then(|| body.clone());
    match (post(body, n).await, resend) {
        (Err(e), Some(body)) if e.is_transient() => post(body, n).await,
        (answer, _) => answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Algorithm;
    use crate::script::Script;

    #[test]
    fn commands_serialize_as_the_json_arrays_they_stand_for() {
        let invocation = Invocation::from_parts(
            Script::single(Algorithm::Gcra),
            ["k\"1", "k2"],
            ["1000", "é\n"],
        );
        let sha = invocation.script.sha1();
        let source = invocation.script.source();
        let evalsha = evalsha_pipeline_body(&[&invocation]).unwrap();
        let eval = eval_pipeline_body(&[&invocation, &invocation]).unwrap();
        let expected = serde_json::json!([["EVALSHA", sha, 2, "k\"1", "k2", "1000", "é\n"]]);
        assert_eq!(evalsha, serde_json::to_vec(&expected).unwrap());
        let one = serde_json::json!(["EVAL", source, 2, "k\"1", "k2", "1000", "é\n"]);
        assert_eq!(eval, serde_json::to_vec(&[&one, &one]).unwrap());
        assert_eq!(evalsha_pipeline_body(&[]).unwrap(), b"[]");
    }

    /// The body as it was made before keys and arguments shared a buffer: `serde_json` over
    /// `Vec<String>`s, by the `Serialize` this module had. What the written body must equal.
    mod before {
        use serde::ser::{Serialize, SerializeSeq, Serializer};

        pub(super) struct Command<'a> {
            pub(super) verb: &'static str,
            pub(super) script: &'a str,
            pub(super) keys: &'a [String],
            pub(super) args: &'a [String],
        }

        impl Serialize for Command<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let (keys, args) = (self.keys, self.args);
                let mut seq = serializer.serialize_seq(Some(3 + keys.len() + args.len()))?;
                seq.serialize_element(self.verb)?;
                seq.serialize_element(self.script)?;
                seq.serialize_element(&keys.len())?;
                for part in keys.iter().chain(args) {
                    seq.serialize_element(part.as_str())?;
                }
                seq.end()
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any keys and arguments — quotes, backslashes, control characters, DEL, non-ASCII,
        /// empty — make the body `serde_json` made of the same strings, by EVALSHA and by EVAL.
        #[test]
        fn the_body_is_what_serde_json_made_of_the_strings(
            calls in proptest::collection::vec(
                (
                    0usize..7,
                    proptest::collection::vec(part(), 0..6),
                    proptest::collection::vec(part(), 0..12),
                ),
                0..4,
            )
        ) {
            let scripts = [
                Script::multi(),
                Script::single(Algorithm::Gcra),
                Script::single(Algorithm::FixedWindow),
                Script::single(Algorithm::SlidingLog),
                Script::list(),
                Script::peek(),
                Script::reset(),
            ];
            let invocations: Vec<Invocation> = calls
                .iter()
                .map(|(script, keys, args)| Invocation::from_parts(scripts[*script], keys, args))
                .collect();
            for ((_, keys, args), invocation) in calls.iter().zip(&invocations) {
                proptest::prop_assert!(invocation.keys() == keys[..], "{keys:?}");
                proptest::prop_assert!(invocation.args() == args[..], "{args:?}");
            }
            let refs: Vec<&Invocation> = invocations.iter().collect();
            for verb in ["EVALSHA", "EVAL"] {
                let old: Vec<before::Command<'_>> = calls
                    .iter()
                    .zip(&invocations)
                    .map(|((_, keys, args), invocation)| before::Command {
                        verb,
                        script: match verb {
                            "EVALSHA" => invocation.script.sha1(),
                            _ => invocation.script.source(),
                        },
                        keys,
                        args,
                    })
                    .collect();
                let body = match verb {
                    "EVALSHA" => evalsha_pipeline_body(&refs).unwrap(),
                    _ => eval_pipeline_body(&refs).unwrap(),
                };
                let expected = serde_json::to_vec(&old).unwrap();
                proptest::prop_assert_eq!(
                    String::from_utf8(body).unwrap(),
                    String::from_utf8(expected).unwrap()
                );
            }
        }
    }

    /// A key or argument: any string, or one drawn mostly from what JSON must escape.
    fn part() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<String>(),
            "[\\\\\"/\\x00-\\x1f\\x7fa-z0-9{}:%#é€😀\\u{2028}\\u{2029}]{0,24}",
            "[0-9-]{0,20}",
        ]
    }

    #[test]
    fn pipeline_answers_decode_or_say_what_is_wrong() {
        let replies = decode_pipeline(
            200,
            r#"[{"result":["MQ==",2,null,"OK"]},{"error":"NOSCRIPT x"}]"#,
            2,
        )
        .unwrap();
        assert_eq!(
            replies,
            vec![
                Reply::Array(vec![
                    Reply::Bulk(b"1".to_vec()),
                    Reply::Int(2),
                    Reply::Nil,
                    Reply::Bulk(b"OK".to_vec()),
                ]),
                Reply::Error("NOSCRIPT x".into()),
            ]
        );
        let err = |status, text: &str, n| decode_pipeline(status, text, n).unwrap_err();
        assert!(
            matches!(err(401, r#"{"error":"bad token"}"#, 1), StoreError::Auth(m) if m == "bad token")
        );
        assert!(
            matches!(err(503, "down", 1), StoreError::Unreachable(m) if m == "HTTP 503 Service Unavailable: down")
        );
        for (status, text, n) in [
            (404, "nope", 1),
            (200, "not json", 1),
            (200, "[]", 1),
            (200, r#"[{"result":"not base64!"}]"#, 1),
            (200, r#"[{"result":1.5}]"#, 1),
            (200, r#"[{"neither":1}]"#, 1),
        ] {
            assert!(
                matches!(err(status, text, n), StoreError::Protocol(_)),
                "{text}"
            );
        }
    }

    #[test]
    fn a_refused_pipeline_is_classified_by_its_error_code_then_its_status() {
        use crate::store::FailureClass;
        let class = |status, text: &str| decode_pipeline(status, text, 1).unwrap_err().class();
        for (status, text, expected) in [
            (
                401,
                r#"{"error":"Unauthorized"}"#,
                FailureClass::RefusedAuth,
            ),
            (403, "forbidden", FailureClass::RefusedAuth),
            (
                400,
                r#"{"error":"WRONGPASS invalid or missing auth token"}"#,
                FailureClass::RefusedAuth,
            ),
            (
                400,
                r#"{"error":"NOPERM this user has no permissions to run the 'evalsha' command"}"#,
                FailureClass::RefusedAuth,
            ),
            (429, "Too Many Requests", FailureClass::OverQuota),
            (
                400,
                r#"{"error":"ERR max daily request limit exceeded. Limit: 10000, Usage: 10000."}"#,
                FailureClass::OverQuota,
            ),
            (502, "bad gateway", FailureClass::Unreachable),
            (
                400,
                r#"{"error":"LOADING Redis is loading the dataset in memory"}"#,
                FailureClass::Unreachable,
            ),
            (
                400,
                r#"{"error":"ERR syntax error"}"#,
                FailureClass::Protocol,
            ),
            (404, "Not Found", FailureClass::Protocol),
            (200, "<html>a captive portal</html>", FailureClass::Protocol),
        ] {
            assert_eq!(class(status, text), expected, "{status} {text}");
        }
    }

    #[test]
    fn pipeline_answers_decode_into_one_reply_per_command() {
        let text = r#"[{"result":[1,-2]},{"error":"NOSCRIPT No matching script"},{"result":"aGk="},{"result":"OK"},{"result":null}]"#;
        assert_eq!(
            decode_pipeline(200, text, 5).unwrap(),
            [
                Reply::Array(vec![Reply::Int(1), Reply::Int(-2)]),
                Reply::Error("NOSCRIPT No matching script".into()),
                Reply::Bulk(b"hi".to_vec()),
                Reply::Bulk(b"OK".to_vec()),
                Reply::Nil,
            ]
        );
        let short = decode_pipeline(200, r#"[{"result":1}]"#, 2).unwrap_err();
        assert!(
            short.to_string().contains("2 commands answered 1"),
            "{short}"
        );
        assert!(decode_pipeline(200, "not json", 1).is_err());
        assert!(decode_pipeline(200, r#"[{"result":"%%"}]"#, 1).is_err());
        // An error wins wherever it stands, a non-string one still is one, other keys are
        // skipped, and an integer must fit an i64.
        let text =
            r#"[{"result":1,"error":"BUSY"},{"error":7},{"x":{"y":[1]},"result":[[],"OK"]}]"#;
        assert_eq!(
            decode_pipeline(200, text, 3).unwrap(),
            [
                Reply::Error("BUSY".into()),
                Reply::Error("ERR".into()),
                Reply::Array(vec![Reply::Array(vec![]), Reply::Bulk(b"OK".to_vec())]),
            ]
        );
        for bad in [
            r#"[{"result":9223372036854775808}]"#,
            r#"[{"result":true}]"#,
            r#"[{"result":{"a":1}}]"#,
            r#"[7]"#,
        ] {
            assert!(
                matches!(decode_pipeline(200, bad, 1), Err(StoreError::Protocol(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_evalsha_body_names_each_script_by_its_sha() {
        let invocation =
            Invocation::from_parts(Script::single(Algorithm::FixedWindow), ["k"], ["", "5"]);
        let body = evalsha_pipeline_body(&[&invocation, &invocation]).unwrap();
        let sha = invocation.script.sha1();
        let one = format!(r#"["EVALSHA","{sha}",1,"k","","5"]"#);
        assert_eq!(String::from_utf8(body).unwrap(), format!("[{one},{one}]"));
    }
}

/// The EVALSHA, NOSCRIPT, EVAL sequence over a canned transport.
#[cfg(test)]
mod sequence_tests {
    use super::*;
    use crate::policy::Algorithm;
    use crate::script::Script;
    use std::cell::RefCell;

    /// A server that answers each posted body from a script of answers, recording the bodies.
    struct Canned {
        answers: RefCell<Vec<Result<Vec<Reply>, StoreError>>>,
        sent: RefCell<Vec<String>>,
    }

    impl Canned {
        fn new(answers: Vec<Result<Vec<Reply>, StoreError>>) -> Canned {
            Canned {
                answers: RefCell::new(answers),
                sent: RefCell::new(Vec::new()),
            }
        }

        async fn post(&self, body: Vec<u8>, n: usize) -> Result<Vec<Reply>, StoreError> {
            self.sent
                .borrow_mut()
                .push(String::from_utf8(body).unwrap());
            let answer = self.answers.borrow_mut().remove(0);
            if let Ok(replies) = &answer {
                assert_eq!(replies.len(), n, "the canned answer fits the pipeline");
            }
            answer
        }
    }

    fn invocation(key: &str) -> Invocation {
        Invocation::from_parts(Script::single(Algorithm::FixedWindow), [key], ["1"])
    }

    fn lost() -> StoreError {
        StoreError::Unreachable("connection reset".into())
    }

    #[test]
    fn noscript_entries_alone_are_resent_by_eval() {
        let (a, b) = (invocation("a"), invocation("b"));
        let server = Canned::new(vec![
            Ok(vec![
                Reply::Int(1),
                Reply::Error("NOSCRIPT No matching script".into()),
            ]),
            Ok(vec![Reply::Int(2)]),
        ]);
        // A script this store has seen run goes by its SHA alone.
        let loaded = LoadedScripts::default();
        loaded.note(&[&a], &[Reply::Int(0)]);
        let replies = futures::executor::block_on(run_scripts(
            |b, n| server.post(b, n),
            &[&a, &b],
            false,
            &loaded,
        ))
        .unwrap();
        assert_eq!(replies, [Reply::Int(1), Reply::Int(2)]);
        assert!(
            loaded.known().is_empty(),
            "NOSCRIPT: Redis lost its scripts"
        );
        let sent = server.sent.borrow();
        assert_eq!(sent.len(), 2);
        assert!(
            sent[0].starts_with("[[\"EVALSHA\"")
                && sent[0].contains("\"a\"")
                && sent[0].contains("\"b\"")
        );
        assert!(
            sent[1].starts_with("[[\"EVAL\"")
                && !sent[1].contains("\"a\"")
                && sent[1].contains("\"b\"")
        );
    }

    #[test]
    fn a_script_not_known_loaded_goes_with_its_source_where_calls_follow_it() {
        let (a, b) = (invocation("a"), invocation("b"));
        let gcra = Invocation::from_parts(Script::single(Algorithm::Gcra), ["c"], ["1"]);
        let server = Canned::new(vec![Ok(vec![Reply::Int(1); 3]), Ok(vec![Reply::Int(1); 3])]);
        let loaded = LoadedScripts::default();
        for _ in 0..2 {
            futures::executor::block_on(run_scripts(
                |b, n| server.post(b, n),
                &[&a, &b, &gcra],
                false,
                &loaded,
            ))
            .unwrap();
        }
        let sent = server.sent.borrow();
        // The first call of the fixed-window script by EVAL, its second and the last call (no
        // call after it to run out of order) by SHA.
        let verbs = |body: &str| -> Vec<String> {
            let value: serde_json::Value = serde_json::from_str(body).unwrap();
            value
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c[0].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(verbs(&sent[0]), ["EVAL", "EVALSHA", "EVALSHA"]);
        assert_eq!(
            verbs(&sent[1]),
            ["EVALSHA", "EVALSHA", "EVALSHA"],
            "both scripts have run"
        );
    }

    #[test]
    fn a_lost_answer_is_resent_only_when_idempotent() {
        let a = invocation("a");
        let server = Canned::new(vec![Err(lost()), Ok(vec![Reply::Int(7)])]);
        let replies = futures::executor::block_on(run_scripts(
            |b, n| server.post(b, n),
            &[&a],
            true,
            &LoadedScripts::default(),
        ));
        assert_eq!(replies.unwrap(), [Reply::Int(7)]);
        assert_eq!(server.sent.borrow().len(), 2);

        let server = Canned::new(vec![Err(lost()), Ok(vec![Reply::Int(7)])]);
        let replies = futures::executor::block_on(run_scripts(
            |b, n| server.post(b, n),
            &[&a],
            false,
            &LoadedScripts::default(),
        ));
        assert_eq!(replies.unwrap_err(), lost());
        assert_eq!(
            server.sent.borrow().len(),
            1,
            "a charge may have run: never resent"
        );

        // What retrying cannot help is not retried either.
        let refused = StoreError::Auth("bad token".into());
        let server = Canned::new(vec![Err(refused.clone()), Ok(vec![Reply::Int(7)])]);
        let replies = futures::executor::block_on(run_scripts(
            |b, n| server.post(b, n),
            &[&a],
            true,
            &LoadedScripts::default(),
        ));
        assert_eq!(replies.unwrap_err(), refused);
        assert_eq!(server.sent.borrow().len(), 1);
    }

    #[test]
    fn nothing_to_run_sends_nothing() {
        let server = Canned::new(vec![]);
        let replies = futures::executor::block_on(run_scripts(
            |b, n| server.post(b, n),
            &[],
            true,
            &LoadedScripts::default(),
        ));
        assert!(replies.unwrap().is_empty());
        assert!(server.sent.borrow().is_empty());
    }
}
