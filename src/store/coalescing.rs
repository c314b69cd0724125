//! [`Coalescing`]: concurrent `check` calls gathered into one call of the store underneath, so
//! one round trip (one `/pipeline` for [`super::RestStore`]) carries many callers' decisions.
//! Measured in `docs/performance.md` §3; the design in `docs/design.md` §3.
//!
//! No runtime of its own (no task is spawned): the callers themselves send the batches. A caller
//! queues its checks; while fewer than `in_flight` batches are out, it takes the lead at once,
//! otherwise it waits. A leader takes one batch from the front of the queue (the oldest checks,
//! one [`TimeSource`], at most `max_batch` checks), sends it, hands every caller of the batch its
//! verdicts, then passes the lead to the oldest caller still waiting. So it runs wherever the
//! inner store does, wasm32 included.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use async_trait::async_trait;

use super::check::{Check, Identifier, Limit, TimeSource, Verdict};
use super::error::StoreError;
use super::traits::{Control, Store};
use crate::control::list::ListEntry;
use crate::control::{Assignment, AssignmentKind};

/// The default most checks in one inner call: the gateway's default `--max-pipeline` (1000
/// commands per `/pipeline`), one command per single-node check.
pub const DEFAULT_MAX_BATCH: usize = 1000;

/// A [`Store`] that gathers concurrent `check` calls into one call of `inner`: checks arriving
/// while a batch is in flight go together in the next. A batch holds checks of one
/// [`TimeSource`] only (the caller's time and the server's are never mixed; two callers' `At`
/// instants differ and go in different batches too) and at most `max_batch` checks; at most
/// `in_flight` batches run at once. Each caller gets its own verdicts, in order; an error of the
/// inner call is every caller's of that batch. One caller's checks larger than `max_batch` go in
/// several inner calls, one after the other, and an error of any is the caller's.
///
/// Order: calls are served oldest first, so a caller that waits for one answer before it sends
/// its next check keeps its order (as each client does with its own identifier). Calls in flight
/// together have no order between them, as with any store.
///
/// A caller cancelled while its batch is out leaves the batch's other callers an
/// [`StoreError::Unreachable`] (the checks may or may not have been applied); a caller cancelled
/// while waiting leaves the queue and nothing of it is sent.
pub struct Coalescing<S> {
    inner: S,
    max_batch: usize,
    in_flight: usize,
    shared: Mutex<Shared>,
}

/// What the callers share: the waiting calls, oldest first, and how many leads are held.
struct Shared {
    queue: VecDeque<Arc<Call>>,
    /// Leads held: batches out, plus leads handed to a caller that has not yet taken its batch.
    leads: usize,
}

/// One caller's `check`, waiting for its batch.
struct Call {
    checks: Vec<Check>,
    time: TimeSource,
    slot: Mutex<Slot>,
}

/// Where a waiting call learns its answer or that it leads.
#[derive(Default)]
struct Slot {
    answer: Option<Result<Vec<Verdict>, StoreError>>,
    /// The call holds a lead: it must send the next batch or pass the lead on.
    lead: bool,
    waker: Option<Waker>,
}

/// Locks a mutex; a poisoned one (a panic elsewhere while held) is still consistent here, since
/// every critical section below only moves values in and out.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Call {
    fn answer(&self, answer: Result<Vec<Verdict>, StoreError>) {
        let mut slot = lock(&self.slot);
        slot.answer = Some(answer);
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }

    fn lead(&self) {
        let mut slot = lock(&self.slot);
        slot.lead = true;
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Coalescing<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shared = lock(&self.shared);
        f.debug_struct("Coalescing")
            .field("inner", &self.inner)
            .field("max_batch", &self.max_batch)
            .field("in_flight", &self.in_flight)
            .field("waiting", &shared.queue.len())
            .field("leads", &shared.leads)
            .finish()
    }
}

impl<S> Coalescing<S> {
    /// Wraps `inner`: batches of at most [`DEFAULT_MAX_BATCH`] checks, one in flight at a time.
    pub fn new(inner: S) -> Coalescing<S> {
        Coalescing {
            inner,
            max_batch: DEFAULT_MAX_BATCH,
            in_flight: 1,
            shared: Mutex::new(Shared {
                queue: VecDeque::new(),
                leads: 0,
            }),
        }
    }

    /// At most `n` checks per inner call (at least 1): for a gateway started with a smaller
    /// `--max-pipeline`, or a store with its own limit.
    pub fn with_max_batch(mut self, n: usize) -> Coalescing<S> {
        self.max_batch = n.max(1);
        self
    }

    /// At most `n` batches in flight at once (at least 1). More overlap round trips; fewer make
    /// bigger batches.
    pub fn with_in_flight(mut self, n: usize) -> Coalescing<S> {
        self.in_flight = n.max(1);
        self
    }

    /// The store underneath.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Takes the next batch: the oldest call, then the calls queued after it that have its time
    /// source, oldest first, while they fit in `max_batch` checks (a call that does not fit
    /// ends the batch, so smaller calls behind it do not overtake it). Calls of another time
    /// source stay where they are, first in line for the next batch; a caller has one call
    /// queued at a time, so its own calls keep their order.
    fn take_batch(&self) -> Vec<Arc<Call>> {
        let mut shared = lock(&self.shared);
        let Some(first) = shared.queue.pop_front() else {
            return Vec::new();
        };
        let time = first.time;
        let mut checks = first.checks.len();
        let mut batch = vec![first];
        let mut i = 0;
        while i < shared.queue.len() && checks < self.max_batch {
            let next = &shared.queue[i];
            if next.time != time {
                i += 1;
                continue;
            }
            if checks + next.checks.len() > self.max_batch {
                break;
            }
            checks += next.checks.len();
            batch.push(shared.queue.remove(i).expect("index in range"));
        }
        batch
    }

    /// Gives up a lead: to the oldest waiting call not already holding one, else the count
    /// drops. (Two leads handed to one call would leave one lost and the count too high.)
    fn pass_lead(&self) {
        let mut shared = lock(&self.shared);
        match shared.queue.iter().find(|c| !lock(&c.slot).lead) {
            Some(next) => next.lead(),
            None => shared.leads -= 1,
        }
    }
}

/// A batch out: answers every call of it not yet answered and passes the lead on, even when the
/// leader's future is dropped mid-call.
struct Out<'a, S> {
    store: &'a Coalescing<S>,
    batch: Vec<Arc<Call>>,
}

impl<S> Drop for Out<'_, S> {
    fn drop(&mut self) {
        for call in &self.batch {
            let mut slot = lock(&call.slot);
            if slot.answer.is_none() {
                slot.answer = Some(Err(StoreError::Unreachable(
                    "the caller sending this coalesced batch was cancelled; its checks may or \
                     may not have been applied"
                        .into(),
                )));
                if let Some(w) = slot.waker.take() {
                    w.wake();
                }
            }
        }
        self.store.pass_lead();
    }
}

/// A caller's place in the queue: leaves it (and passes on a lead it holds) if the caller is
/// cancelled before its answer.
struct Ticket<'a, S> {
    store: &'a Coalescing<S>,
    call: Arc<Call>,
    /// The call returned its answer: nothing to undo.
    done: bool,
}

impl<S> Drop for Ticket<'_, S> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Shared, then the slot: the order `pass_lead` locks them in, so no lead can reach this
        // call once it has left the queue.
        let lead = {
            let mut shared = lock(&self.store.shared);
            shared.queue.retain(|c| !Arc::ptr_eq(c, &self.call));
            let lead = std::mem::take(&mut lock(&self.call.slot).lead);
            lead
        };
        if lead {
            self.store.pass_lead();
        }
    }
}

impl<S: Store> Coalescing<S> {
    /// Sends one batch through the inner store (in chunks of `max_batch` when one call alone is
    /// larger) and answers its calls.
    async fn send(&self, batch: Vec<Arc<Call>>) {
        let out = Out { store: self, batch };
        let time = out.batch[0].time;
        let answers: Result<Vec<Verdict>, StoreError> = if out.batch.len() == 1 {
            let mut verdicts = Vec::with_capacity(out.batch[0].checks.len());
            let mut failed = None;
            for chunk in out.batch[0].checks.chunks(self.max_batch) {
                match self.inner.check(chunk, time).await {
                    Ok(v) => verdicts.extend(v),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            failed.map_or(Ok(verdicts), Err)
        } else {
            let checks: Vec<Check> = out
                .batch
                .iter()
                .flat_map(|c| c.checks.iter().cloned())
                .collect();
            self.inner.check(&checks, time).await
        };
        match answers {
            Ok(verdicts) => {
                let total: usize = out.batch.iter().map(|c| c.checks.len()).sum();
                if verdicts.len() != total {
                    let e = StoreError::Protocol(format!(
                        "the store answered {} verdicts for a coalesced batch of {total} checks",
                        verdicts.len()
                    ));
                    for call in &out.batch {
                        call.answer(Err(e.clone()));
                    }
                } else {
                    let mut verdicts = verdicts.into_iter();
                    for call in &out.batch {
                        call.answer(Ok(verdicts.by_ref().take(call.checks.len()).collect()));
                    }
                }
            }
            Err(e) => {
                for call in &out.batch {
                    call.answer(Err(e.clone()));
                }
            }
        }
        // `out` drops here: the lead passes on.
    }
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Store> Store for Coalescing<S> {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let call = Arc::new(Call {
            checks: checks.to_vec(),
            time,
            slot: Mutex::new(Slot::default()),
        });
        {
            let mut shared = lock(&self.shared);
            shared.queue.push_back(call.clone());
            if shared.leads < self.in_flight {
                shared.leads += 1;
                lock(&call.slot).lead = true;
            }
        }
        let mut ticket = Ticket {
            store: self,
            call,
            done: false,
        };
        loop {
            let (answer, lead) = poll_fn(|cx| {
                let mut slot = lock(&ticket.call.slot);
                if slot.answer.is_some() || slot.lead {
                    let lead = std::mem::take(&mut slot.lead);
                    Poll::Ready((slot.answer.take(), lead))
                } else {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            })
            .await;
            match (answer, lead) {
                (Some(answer), lead) => {
                    // Answered by another leader's batch: a lead handed over meanwhile is passed on.
                    if lead {
                        self.pass_lead();
                    }
                    ticket.done = true;
                    return answer;
                }
                (None, _) => {
                    let batch = self.take_batch();
                    if batch.is_empty() {
                        // Another leader took this call (and all behind it) into its batch
                        // after the lead was handed here: nothing to send, the lead goes back.
                        self.pass_lead();
                    } else {
                        self.send(batch).await;
                    }
                }
            }
        }
    }
}

// Control operations are rare and not batched: each goes straight to the inner store.
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Control> Control for Coalescing<S> {
    async fn assign(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        assignment: Option<&Assignment>,
        until_ms: Option<u64>,
    ) -> Result<(), StoreError> {
        self.inner
            .assign(limit, identifier, assignment, until_ms)
            .await
    }

    async fn clear_assignment(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        kind: AssignmentKind,
    ) -> Result<(), StoreError> {
        self.inner.clear_assignment(limit, identifier, kind).await
    }

    async fn assignments(
        &self,
        limit: &Limit,
        identifier: &Identifier,
    ) -> Result<Vec<(Assignment, Option<u64>)>, StoreError> {
        self.inner.assignments(limit, identifier).await
    }

    async fn list_add(
        &self,
        list: &str,
        entry: &ListEntry,
        until_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.inner.list_add(list, entry, until_ms, now_ms).await
    }

    async fn list_remove(&self, list: &str, entry: &ListEntry) -> Result<bool, StoreError> {
        self.inner.list_remove(list, entry).await
    }

    async fn list_entries(
        &self,
        list: &str,
        now_ms: u64,
    ) -> Result<Vec<(String, Option<u64>)>, StoreError> {
        self.inner.list_entries(list, now_ms).await
    }

    async fn peek(
        &self,
        limit: &Limit,
        identifier: &Identifier,
        time: TimeSource,
    ) -> Result<Verdict, StoreError> {
        self.inner.peek(limit, identifier, time).await
    }

    async fn reset(&self, limit: &Limit, identifier: &Identifier) -> Result<bool, StoreError> {
        self.inner.reset(limit, identifier).await
    }
}
