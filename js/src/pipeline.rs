//! How invocations travel over the Upstash REST protocol, whatever sends the bytes: one
//! `/pipeline` by `EVALSHA`, then those a fresh Redis answered `NOSCRIPT` by `EVAL` in one more,
//! each pipeline sent once more after a transient failure when the batch is idempotent (a lost
//! answer may have run: a blind resend would charge twice) — the protocol `RestStore` speaks
//! (docs/design.md §3), here over a `post` the caller supplies (JavaScript's `fetch` in the
//! package), so the sequence is tested natively.

use std::future::Future;

use edgelimit::script::{is_noscript, Invocation, Reply};
use edgelimit::store::{eval_pipeline_body, evalsha_pipeline_body};
use edgelimit::StoreError;

/// Runs `invocations` through `post(body, commands)`, which sends one `/pipeline` and reads one
/// reply per command. One reply per invocation, in order.
pub async fn run<P, F>(
    post: P,
    invocations: &[&Invocation],
    idempotent: bool,
) -> Result<Vec<Reply>, StoreError>
where
    P: Fn(Vec<u8>, usize) -> F,
    F: Future<Output = Result<Vec<Reply>, StoreError>>,
{
    if invocations.is_empty() {
        return Ok(Vec::new());
    }
    let body = evalsha_pipeline_body(invocations)?;
    let mut replies = resent_if(&post, idempotent, body, invocations.len()).await?;
    let missing: Vec<usize> = replies
        .iter()
        .enumerate()
        .filter_map(|(i, r)| matches!(r, Reply::Error(m) if is_noscript(m)).then_some(i))
        .collect();
    if !missing.is_empty() {
        let resend: Vec<&Invocation> = missing.iter().map(|&i| invocations[i]).collect();
        let body = eval_pipeline_body(&resend)?;
        let resent = resent_if(&post, idempotent, body, resend.len()).await?;
        for (i, reply) in missing.into_iter().zip(resent) {
            replies[i] = reply;
        }
    }
    Ok(replies)
}

/// `post`, sent once more after a transient failure when `idempotent`.
async fn resent_if<P, F>(
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
    use edgelimit::policy::Algorithm;
    use edgelimit::script::Script;
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
        let replies =
            futures::executor::block_on(run(|b, n| server.post(b, n), &[&a, &b], false)).unwrap();
        assert_eq!(replies, [Reply::Int(1), Reply::Int(2)]);
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
    fn a_lost_answer_is_resent_only_when_idempotent() {
        let a = invocation("a");
        let server = Canned::new(vec![Err(lost()), Ok(vec![Reply::Int(7)])]);
        let replies = futures::executor::block_on(run(|b, n| server.post(b, n), &[&a], true));
        assert_eq!(replies.unwrap(), [Reply::Int(7)]);
        assert_eq!(server.sent.borrow().len(), 2);

        let server = Canned::new(vec![Err(lost()), Ok(vec![Reply::Int(7)])]);
        let replies = futures::executor::block_on(run(|b, n| server.post(b, n), &[&a], false));
        assert_eq!(replies.unwrap_err(), lost());
        assert_eq!(
            server.sent.borrow().len(),
            1,
            "a charge may have run: never resent"
        );

        // What retrying cannot help is not retried either.
        let refused = StoreError::Auth("bad token".into());
        let server = Canned::new(vec![Err(refused.clone()), Ok(vec![Reply::Int(7)])]);
        let replies = futures::executor::block_on(run(|b, n| server.post(b, n), &[&a], true));
        assert_eq!(replies.unwrap_err(), refused);
        assert_eq!(server.sent.borrow().len(), 1);
    }

    #[test]
    fn nothing_to_run_sends_nothing() {
        let server = Canned::new(vec![]);
        let replies = futures::executor::block_on(run(|b, n| server.post(b, n), &[], true));
        assert!(replies.unwrap().is_empty());
        assert!(server.sent.borrow().is_empty());
    }
}
