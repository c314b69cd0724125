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
//!
//! A batch's round trip is a future of its own, owning what it needs (the inner store is shared
//! by an `Arc`), so it does not depend on the leader's future: a leader cancelled mid-flight
//! hands the round trip to the batch's other callers, and whichever of them is polled drives it
//! to its end.

// On wasm32 a store's trip is a JavaScript future, neither `Send` nor `Sync`, and so are the
// shared queue and calls that hold it; the isolate has one thread, where an `Arc` costs what an
// `Rc` would, and one type serves both targets.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;

use super::check::{Check, TimeSource, Verdict};
use super::error::StoreError;
use super::traits::{Control, Store};
use crate::control::{ControlAnswer, ControlOp};

/// The default most checks in one inner call: the gateway's default `--max-pipeline` (1000
/// commands per `/pipeline`), one command per single-node check.
pub const DEFAULT_MAX_BATCH: usize = 1000;

/// What a batch's round trip answers: every check's verdict, in order.
type Answer = Result<Vec<Verdict>, StoreError>;

/// A batch's round trip, owning what it needs: any of the batch's callers may drive it.
#[cfg(not(target_arch = "wasm32"))]
type RoundTrip = Pin<Box<dyn Future<Output = Answer> + Send>>;
/// A batch's round trip (wasm32: JS futures are not `Send`).
#[cfg(target_arch = "wasm32")]
type RoundTrip = Pin<Box<dyn Future<Output = Answer>>>;

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
/// Cancellation: a caller cancelled while waiting leaves the queue and nothing of it is sent. A
/// caller cancelled while its batch is out — the one that sent it included — takes nothing from
/// the batch's other callers: the round trip goes on, driven by them, and each gets its real
/// verdicts. Only when every caller of a batch is gone is its round trip dropped (its checks
/// may or may not have been applied, as with any cancelled store call).
pub struct Coalescing<S> {
    inner: Arc<S>,
    max_batch: usize,
    in_flight: usize,
    shared: Arc<Mutex<Shared>>,
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

/// Where a waiting call learns its answer, that it leads, or that it must drive its batch.
#[derive(Default)]
struct Slot {
    answer: Option<Answer>,
    /// The call holds a lead: it must send the next batch or pass the lead on.
    lead: bool,
    waker: Option<Waker>,
    /// The call's batch, left by its cancelled leader: the call drives it when polled.
    orphan: Option<Arc<Orphan>>,
    /// The caller is gone (answered or cancelled): no batch is handed to it.
    gone: bool,
}

/// Locks a mutex; a poisoned one (a panic elsewhere while held) is still consistent here, since
/// every critical section below only moves values in and out.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Call {
    fn answer(&self, answer: Answer) {
        let mut slot = lock(&self.slot);
        slot.answer = Some(answer);
        // The batch is over: the call no longer holds it (nor the batch the call).
        slot.orphan = None;
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

    fn wake(&self) {
        if let Some(w) = lock(&self.slot).waker.take() {
            w.wake();
        }
    }
}

/// Gives up a lead: to the oldest waiting call not already holding one, else the count drops.
/// (Two leads handed to one call would leave one lost and the count too high.)
fn pass_lead(shared: &Mutex<Shared>) {
    let mut shared = lock(shared);
    match shared.queue.iter().find(|c| !lock(&c.slot).lead) {
        Some(next) => next.lead(),
        None => shared.leads -= 1,
    }
}

/// Hands every call of `batch` its verdicts from `answer`: its own share, in order.
fn finish(batch: &[Arc<Call>], answer: Answer) {
    match answer {
        Ok(verdicts) => {
            let total: usize = batch.iter().map(|c| c.checks.len()).sum();
            if verdicts.len() != total {
                let e = StoreError::Protocol(format!(
                    "the store answered {} verdicts for a coalesced batch of {total} checks",
                    verdicts.len()
                ));
                for call in batch {
                    call.answer(Err(e.clone()));
                }
            } else {
                let mut verdicts = verdicts.into_iter();
                for call in batch {
                    call.answer(Ok(verdicts.by_ref().take(call.checks.len()).collect()));
                }
            }
        }
        Err(e) => {
            for call in batch {
                call.answer(Err(e.clone()));
            }
        }
    }
}

/// A batch whose leader was cancelled mid-flight: its round trip, held by the calls still
/// waiting for it (each call's [`Slot::orphan`]); whichever is polled drives it. It holds the
/// batch's lead until it ends, or until every one of its callers is gone and it is dropped.
struct Orphan {
    /// `None` once the round trip answered.
    trip: Mutex<Option<RoundTrip>>,
    batch: Vec<Arc<Call>>,
    shared: Arc<Mutex<Shared>>,
}

impl Orphan {
    /// Polls the round trip with the caller's context; once it answers, every call of the batch
    /// gets its verdicts and the lead passes on. False while it has not answered, or while
    /// another caller is polling it (that one then answers everyone, or wakes them when it is
    /// cancelled).
    fn drive(&self, cx: &mut Context<'_>) -> bool {
        let mut trip = match self.trip.try_lock() {
            Ok(trip) => trip,
            Err(TryLockError::WouldBlock) => return false,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        let Some(future) = trip.as_mut() else {
            return true;
        };
        let Poll::Ready(answer) = future.as_mut().poll(cx) else {
            return false;
        };
        *trip = None;
        drop(trip);
        finish(&self.batch, answer);
        pass_lead(&self.shared);
        true
    }

    /// Wakes the batch's calls but `gone`: the caller that was last to poll the round trip is
    /// cancelled, so another must poll it (and be the one its I/O wakes).
    fn wake_others(&self, gone: &Arc<Call>) {
        for call in &self.batch {
            if !Arc::ptr_eq(call, gone) {
                call.wake();
            }
        }
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        // Every caller gone before the round trip answered: it is dropped with its lead.
        let unfinished = lock(&self.trip).take().is_some();
        if unfinished {
            pass_lead(&self.shared);
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
            inner: Arc::new(inner),
            max_batch: DEFAULT_MAX_BATCH,
            in_flight: 1,
            shared: Arc::new(Mutex::new(Shared {
                queue: VecDeque::new(),
                leads: 0,
            })),
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

    /// Gives up a lead (see [`pass_lead`]).
    fn pass_lead(&self) {
        pass_lead(&self.shared);
    }
}

/// A batch out, sent by `leader`: if the leader's future is dropped before the round trip
/// answers, the round trip goes to the batch's other callers (an [`Orphan`]).
struct Out<'a, S> {
    store: &'a Coalescing<S>,
    batch: Vec<Arc<Call>>,
    leader: Arc<Call>,
    /// `None` once it answered (and the batch was answered, the lead passed on).
    trip: Option<RoundTrip>,
}

impl<S> Drop for Out<'_, S> {
    fn drop(&mut self) {
        let Some(trip) = self.trip.take() else {
            return;
        };
        if std::thread::panicking() {
            // The round trip may be what panicked: never polled again. Its callers learn it
            // failed, as they would if it had answered so.
            drop(trip);
            finish(
                &self.batch,
                Err(StoreError::Unreachable(
                    "the caller sending this coalesced batch panicked; its checks may or may \
                     not have been applied"
                        .into(),
                )),
            );
            self.store.pass_lead();
            return;
        }
        let orphan = Arc::new(Orphan {
            trip: Mutex::new(Some(trip)),
            batch: std::mem::take(&mut self.batch),
            shared: self.store.shared.clone(),
        });
        for call in &orphan.batch {
            if Arc::ptr_eq(call, &self.leader) {
                continue;
            }
            let mut slot = lock(&call.slot);
            if slot.gone {
                continue;
            }
            slot.orphan = Some(orphan.clone());
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        }
        // No caller left to take it: `orphan` drops here, and with it the round trip and its
        // lead.
    }
}

/// A caller's place in the queue: leaves it (and passes on a lead it holds) if the caller is
/// cancelled before its answer, and leaves the round trip it was driving to the others.
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
        let (lead, orphan) = {
            let mut shared = lock(&self.store.shared);
            shared.queue.retain(|c| !Arc::ptr_eq(c, &self.call));
            let mut slot = lock(&self.call.slot);
            slot.gone = true;
            (std::mem::take(&mut slot.lead), slot.orphan.take())
        };
        if lead {
            self.store.pass_lead();
        }
        if let Some(orphan) = orphan {
            orphan.wake_others(&self.call);
        }
    }
}

impl<S: Store + 'static> Coalescing<S> {
    /// The round trip of `batch`: one inner call (in chunks of `max_batch`, one after the
    /// other, when one call alone is larger), owning the store's `Arc` and its checks.
    fn round_trip(&self, batch: &[Arc<Call>]) -> RoundTrip {
        let inner = self.inner.clone();
        let time = batch[0].time;
        if let [call] = batch {
            let call = call.clone();
            let max_batch = self.max_batch;
            Box::pin(async move {
                let mut verdicts = Vec::with_capacity(call.checks.len());
                for chunk in call.checks.chunks(max_batch) {
                    verdicts.extend(inner.check(chunk, time).await?);
                }
                Ok(verdicts)
            })
        } else {
            let checks: Vec<Check> = batch
                .iter()
                .flat_map(|c| c.checks.iter().cloned())
                .collect();
            Box::pin(async move { inner.check(&checks, time).await })
        }
    }

    /// Sends one batch and answers its calls, then passes the lead on.
    async fn send(&self, batch: Vec<Arc<Call>>, leader: &Arc<Call>) {
        let trip = self.round_trip(&batch);
        let mut out = Out {
            store: self,
            batch,
            leader: leader.clone(),
            trip: Some(trip),
        };
        let answer = poll_fn(|cx| match out.trip.as_mut() {
            Some(trip) => trip.as_mut().poll(cx),
            None => Poll::Pending,
        })
        .await;
        out.trip = None;
        finish(&out.batch, answer);
        self.pass_lead();
    }
}

/// What a waiting caller does next.
enum Next {
    /// Return the answer (passing on a lead handed to it meanwhile, if `true`).
    Answer(Answer, bool),
    /// Send the next batch.
    Lead,
}

#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Store + 'static> Store for Coalescing<S> {
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
            let next = poll_fn(|cx| loop {
                let orphan = {
                    let mut slot = lock(&ticket.call.slot);
                    if let Some(answer) = slot.answer.take() {
                        let lead = std::mem::take(&mut slot.lead);
                        return Poll::Ready(Next::Answer(answer, lead));
                    }
                    if std::mem::take(&mut slot.lead) {
                        return Poll::Ready(Next::Lead);
                    }
                    // Set before driving: whoever answers the batch wakes this caller.
                    slot.waker = Some(cx.waker().clone());
                    slot.orphan.clone()
                };
                match orphan {
                    // It answered: this call's answer is in its slot.
                    Some(orphan) if orphan.drive(cx) => continue,
                    _ => return Poll::Pending,
                }
            })
            .await;
            match next {
                Next::Answer(answer, lead) => {
                    // Answered by another leader's batch: a lead handed over meanwhile is passed on.
                    if lead {
                        self.pass_lead();
                    }
                    ticket.done = true;
                    return answer;
                }
                Next::Lead => {
                    let batch = self.take_batch();
                    if batch.is_empty() {
                        // Another leader took this call (and all behind it) into its batch
                        // after the lead was handed here: nothing to send, the lead goes back.
                        self.pass_lead();
                    } else {
                        self.send(batch, &ticket.call).await;
                    }
                }
            }
        }
    }
}

// Control operations are rare and not batched: each goes straight to the inner store.
#[cfg_attr(not(target_arch = "wasm32"), async_trait)]
#[cfg_attr(target_arch = "wasm32", async_trait(?Send))]
impl<S: Control + 'static> Control for Coalescing<S> {
    async fn apply(&self, op: ControlOp) -> Result<ControlAnswer, StoreError> {
        self.inner.apply(op).await
    }
}
