//! `Coalescing`: concurrent checks gathered into one inner call. Against a real gateway and
//! redis-server, 64 concurrent clients decide exactly as `MemoryStore` does on the same
//! sequences with fewer `/pipeline` requests than checks; with a fake inner store that counts its
//! calls, batches never mix time sources, never exceed `max_batch` nor `in_flight`, an error
//! reaches every caller of its batch, and each caller gets its own verdicts in order; a caller
//! cancelled anywhere — the leader of a batch in flight included — never fails the others.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use edgelimit::Control;
use edgelimit::{
    Check, Coalescing, Limit, MemoryStore, Policy, Store, StoreError, TimeSource, Verdict,
};
use edgelimit_gateway::{Gateway, MetricsPage};
use edgelimit_testkit::metrics::Samples;
use edgelimit_testkit::{gateway, RedisServer};

const TOKEN: &str = "coalescing-token";
const CLIENTS: usize = 64;
const CHECKS: usize = 50;
const BASE_MS: u64 = 1_700_000_000_000;

/// The `/pipeline` requests the gateway answered so far, from its `/metrics` page.
async fn pipeline_requests(url: &str) -> u64 {
    let page = reqwest::Client::new()
        .get(format!("{url}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("gateway answers /metrics")
        .text()
        .await
        .expect("a text page");
    let samples = Samples::parse(&page).unwrap_or_else(|e| panic!("{e}"));
    samples
        .series("edgelimit_gateway_http_requests_total")
        .into_iter()
        .filter(|(labels, _)| labels.get("route").map(String::as_str) == Some("pipeline"))
        .map(|(_, value)| value as u64)
        .sum()
}

/// Client `c`'s check `i`: its own identifier, at an instant every client shares for its `i`-th
/// check (so concurrent clients' checks can share a batch).
fn client_check(limit: &Limit, c: usize, i: usize) -> (Check, TimeSource) {
    (
        Check::single(limit, format!("client-{c}"), 1 + (i % 3) as i64),
        TimeSource::At(BASE_MS + 40 * i as u64),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_through_a_gateway_decide_as_memory_does_in_fewer_pipelines() {
    let server = RedisServer::start();
    let mut config = gateway::config(server.url(), TOKEN);
    config.metrics = MetricsPage::Token;
    let gateway = Gateway::start(config).await.expect("gateway starts");
    let url = gateway::url(&gateway);
    let rest = gateway::rest_store(&gateway, TOKEN)
        // Decisions are compared, not latency: a loaded machine must not fail a check.
        .with_timeout(std::time::Duration::from_secs(30))
        .with_namespace("coalescing-test");
    let store = Arc::new(Coalescing::new(rest));
    let limit = Limit::new("api", "gcra 10/1s".parse::<Policy>().unwrap());
    let before = pipeline_requests(&url).await;

    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (store, limit) = (store.clone(), limit.clone());
            tokio::spawn(async move {
                let mut verdicts = Vec::with_capacity(CHECKS);
                for i in 0..CHECKS {
                    let (check, time) = client_check(&limit, c, i);
                    let mut v = store.check(&[check], time).await.expect("store answers");
                    assert_eq!(v.len(), 1, "one verdict per check");
                    verdicts.push(v.remove(0));
                }
                verdicts
            })
        })
        .collect();
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.expect("client task"));
    }

    let memory = MemoryStore::new();
    let mut allowed = 0;
    for (c, verdicts) in got.iter().enumerate() {
        for (i, verdict) in verdicts.iter().enumerate() {
            let (check, time) = client_check(&limit, c, i);
            let expected = memory.check(&[check], time).await.unwrap().remove(0);
            assert_eq!(verdict, &expected, "client {c}, check {i}");
            allowed += usize::from(verdict.allowed);
        }
    }
    assert!(
        0 < allowed && allowed < CLIENTS * CHECKS,
        "the sequences both admit and deny ({allowed} admitted)"
    );
    let pipelines = pipeline_requests(&url).await - before;
    assert!(
        pipelines < (CLIENTS * CHECKS) as u64,
        "{pipelines} /pipeline requests for {} checks",
        CLIENTS * CHECKS
    );
    eprintln!(
        "{} checks in {pipelines} /pipeline requests",
        CLIENTS * CHECKS
    );
    gateway.shutdown().await;
}

/// One inner call as the fake saw it: its time source and each check's identifier.
#[derive(Debug, Clone)]
struct Seen {
    time: TimeSource,
    identifiers: Vec<String>,
}

/// An inner store that records its calls and answers each check with a verdict carrying the
/// check's number (its identifier `…-N`) as `decided_at_ms`, so a caller can tell its own
/// verdicts. Every call waits until `open` is set, so callers pile up behind the first batch.
#[derive(Debug, Default)]
struct Fake {
    calls: Mutex<Vec<Seen>>,
    running: AtomicUsize,
    most_running: AtomicUsize,
    open: tokio::sync::Notify,
    opened: std::sync::atomic::AtomicBool,
    fail: bool,
}

#[async_trait]
impl Store for Fake {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        let identifiers: Vec<String> = checks
            .iter()
            .map(|c| String::from_utf8_lossy(c.items()[0].identifier.as_bytes()).into_owned())
            .collect();
        self.calls.lock().unwrap().push(Seen {
            time,
            identifiers: identifiers.clone(),
        });
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        while !self.opened.load(Ordering::SeqCst) {
            let notified = self.open.notified();
            if self.opened.load(Ordering::SeqCst) {
                break;
            }
            notified.await;
        }
        tokio::task::yield_now().await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        if self.fail {
            return Err(StoreError::Unreachable("the fake is down".into()));
        }
        Ok(identifiers
            .iter()
            .map(|id| Verdict {
                allowed: true,
                decisions: Vec::new(),
                atomic: true,
                decided_at_ms: id.rsplit('-').next().unwrap().parse().unwrap(),
                listed: Vec::new(),
            })
            .collect())
    }
}

impl Fake {
    fn open(&self) {
        self.opened.store(true, Ordering::SeqCst);
        self.open.notify_waiters();
    }
}

/// Caller `c`'s checks: `n` of them numbered `c * 1000 + j`, and its time source (odd callers
/// the server's, even ones two caller instants).
fn caller(limit: &Limit, c: usize, n: usize) -> (Vec<Check>, TimeSource) {
    let checks = (0..n)
        .map(|j| Check::single(limit, format!("caller-{}", c * 1000 + j), 1))
        .collect();
    let time = match c % 3 {
        0 => TimeSource::Server,
        1 => TimeSource::At(BASE_MS),
        _ => TimeSource::At(BASE_MS + 1),
    };
    (checks, time)
}

/// Runs `callers` concurrent callers (caller `c` sends `1 + c % 4` checks, caller 0 sends
/// `first` checks) through a `Coalescing` over `fake`; once all are queued the fake answers.
async fn pile_up(
    fake: Arc<Fake>,
    callers: usize,
    first: usize,
    max_batch: usize,
    in_flight: usize,
) -> Vec<Result<Vec<Verdict>, StoreError>> {
    let store = Arc::new(
        Coalescing::new(FakeRef(fake.clone()))
            .with_max_batch(max_batch)
            .with_in_flight(in_flight),
    );
    let limit = Limit::new("api", "fixed 100/1s".parse::<Policy>().unwrap());
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (store, limit) = (store.clone(), limit.clone());
            let n = if c == 0 { first } else { 1 + c % 4 };
            tokio::spawn(async move {
                let (checks, time) = caller(&limit, c, n);
                store.check(&checks, time).await
            })
        })
        .collect();
    // A current-thread runtime: yielding lets every caller run up to its wait.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    fake.open();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("caller task"));
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn batches_keep_one_time_source_fit_max_batch_and_answer_each_caller_in_order() {
    let fake = Arc::new(Fake::default());
    let (callers, first, max_batch, in_flight) = (40, 12, 5, 2);
    let answers = pile_up(fake.clone(), callers, first, max_batch, in_flight).await;
    let calls = fake.calls.lock().unwrap().clone();

    let limit = Limit::new("api", "fixed 100/1s".parse::<Policy>().unwrap());
    let mut checks_sent = 0;
    for call in &calls {
        assert!(
            call.identifiers.len() <= max_batch,
            "a batch of {} checks",
            call.identifiers.len()
        );
        for id in &call.identifiers {
            let number: usize = id.rsplit('-').next().unwrap().parse().unwrap();
            let (_, time) = caller(&limit, number / 1000, 1);
            assert_eq!(time, call.time, "{id} sent in a batch of {:?}", call.time);
        }
        checks_sent += call.identifiers.len();
    }
    let expected_checks: usize = first + (1..callers).map(|c| 1 + c % 4).sum::<usize>();
    assert_eq!(checks_sent, expected_checks, "every check sent once");
    assert!(
        calls.len() < callers,
        "{} inner calls for {callers} callers: batches formed",
        calls.len()
    );
    assert!(
        calls.iter().any(|c| c.identifiers.len() > 1),
        "some batch holds several checks"
    );
    let most = fake.most_running.load(Ordering::SeqCst);
    assert!(most <= in_flight, "{most} batches in flight at once");
    for (c, answer) in answers.into_iter().enumerate() {
        let verdicts = answer.expect("the fake answers");
        let n = if c == 0 { first } else { 1 + c % 4 };
        let numbers: Vec<u64> = verdicts.iter().map(|v| v.decided_at_ms).collect();
        let expected: Vec<u64> = (0..n).map(|j| (c * 1000 + j) as u64).collect();
        assert_eq!(
            numbers, expected,
            "caller {c} gets its own verdicts in order"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn an_inner_error_reaches_every_caller_of_its_batch() {
    let fake = Arc::new(Fake {
        fail: true,
        ..Fake::default()
    });
    let callers = 12;
    let answers = pile_up(fake.clone(), callers, 1, 1000, 1).await;
    let calls = fake.calls.lock().unwrap().len();
    assert!(
        calls < callers,
        "{calls} inner calls: callers shared batches"
    );
    for (c, answer) in answers.into_iter().enumerate() {
        assert_eq!(
            answer.unwrap_err(),
            StoreError::Unreachable("the fake is down".into()),
            "caller {c}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_caller_cancelled_while_waiting_sends_nothing_and_blocks_no_one() {
    let fake = Arc::new(Fake::default());
    let store = Arc::new(Coalescing::new(FakeRef(fake.clone())));
    let limit = Limit::new("api", "fixed 100/1s".parse::<Policy>().unwrap());
    let (first, time) = caller(&limit, 1, 1);
    let leader = {
        let store = store.clone();
        tokio::spawn(async move { store.check(&first, time).await })
    };
    let (second, _) = caller(&limit, 2, 1);
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.check(&second, time).await })
    };
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    fake.open();
    assert_eq!(leader.await.unwrap().unwrap()[0].decided_at_ms, 1000);
    // The lead came back: a later caller is served.
    let (third, _) = caller(&limit, 4, 1);
    assert_eq!(
        store.check(&third, time).await.unwrap()[0].decided_at_ms,
        4000
    );
    let sent: Vec<String> = fake
        .calls
        .lock()
        .unwrap()
        .iter()
        .flat_map(|c| c.identifiers.clone())
        .collect();
    assert_eq!(
        sent,
        ["caller-1000", "caller-4000"],
        "the cancelled check was not sent"
    );
}

/// The fake, shared with the test that inspects it.
#[derive(Debug)]
struct FakeRef(Arc<Fake>);

#[async_trait]
impl Store for FakeRef {
    async fn check(&self, c: &[Check], t: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        self.0.check(c, t).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lead_comes_back_wave_after_wave() {
    let fake = Arc::new(Fake::default());
    fake.open();
    let store = Arc::new(Coalescing::new(FakeRef(fake.clone())).with_in_flight(3));
    let limit = Limit::new("api", "fixed 100/1s".parse::<Policy>().unwrap());
    for wave in 0..20 {
        let tasks: Vec<_> = (0..30)
            .map(|c| {
                let (store, limit) = (store.clone(), limit.clone());
                tokio::spawn(async move {
                    let (checks, time) = caller(&limit, c, 1 + c % 2);
                    store.check(&checks, time).await
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("caller task").expect("the fake answers");
        }
        let state = format!("{store:?}");
        assert!(
            state.contains("waiting: 0, leads: 0"),
            "wave {wave}: every lead given back: {state}"
        );
    }
}

/// The control operations are not batched but must reach the inner store: through the wrapper, a
/// tier, a list entry, a peek and a reset act exactly as on the store itself.
#[tokio::test(flavor = "current_thread")]
async fn control_operations_go_straight_to_the_inner_store() {
    use edgelimit::control::list::ListEntry;
    use edgelimit::Assignment;

    let limit = Limit::new("per-key", "fixed 2/1m".parse::<Policy>().unwrap())
        .with_tiers([("pro", "fixed 10/1m".parse::<Policy>().unwrap())])
        .unwrap();
    let store = Coalescing::new(MemoryStore::new());
    let who = edgelimit::Identifier::from("alice");
    let now = 1_000_000;

    store
        .assign(&limit, &who, Some(&Assignment::Tier("pro".into())), None)
        .await
        .unwrap();
    let held = store.inner().assignments(&limit, &who).await.unwrap();
    assert_eq!(held.len(), 1, "the tier reached the inner store: {held:?}");
    assert_eq!(store.assignments(&limit, &who).await.unwrap(), held);

    store
        .check(
            &[Check::single(&limit, who.clone(), 3)],
            TimeSource::At(now),
        )
        .await
        .unwrap();
    let peeked = store.peek(&limit, &who, TimeSource::At(now)).await.unwrap();
    assert_eq!(peeked.decisions[0].limit, 10, "peek sees the tier's limit");
    assert_eq!(peeked.decisions[0].remaining, 7);
    assert!(store.reset(&limit, &who).await.unwrap());
    let after = store.peek(&limit, &who, TimeSource::At(now)).await.unwrap();
    assert_eq!(after.decisions[0].remaining, 10);

    let entry: ListEntry = "ip 203.0.113.0/24".parse().unwrap();
    store.list_add("deny", &entry, None, now).await.unwrap();
    let listed = store.inner().list_entries("deny", now).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(store.list_entries("deny", now).await.unwrap(), listed);
    assert!(store.list_remove("deny", &entry).await.unwrap());
    assert!(store
        .inner()
        .list_entries("deny", now)
        .await
        .unwrap()
        .is_empty());
}

/// An inner store whose calls each wait for a permit (one [`Gated::release`] lets one call
/// answer), recording their identifiers and counting the calls dropped before they answered.
#[derive(Debug)]
struct Gated {
    calls: Mutex<Vec<Vec<String>>>,
    permits: tokio::sync::Semaphore,
    dropped: AtomicUsize,
}

impl Gated {
    fn new() -> Arc<Gated> {
        Arc::new(Gated {
            calls: Mutex::new(Vec::new()),
            permits: tokio::sync::Semaphore::new(0),
            dropped: AtomicUsize::new(0),
        })
    }

    fn release(&self) {
        self.permits.add_permits(1);
    }

    fn sent(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap().clone()
    }
}

/// Counts a call dropped before it answered.
struct DropCount<'a>(&'a AtomicUsize, bool);

impl Drop for DropCount<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[derive(Debug)]
struct GatedRef(Arc<Gated>);

#[async_trait]
impl Store for GatedRef {
    async fn check(&self, checks: &[Check], _: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        let gated = &self.0;
        let identifiers: Vec<String> = checks
            .iter()
            .map(|c| String::from_utf8_lossy(c.items()[0].identifier.as_bytes()).into_owned())
            .collect();
        gated.calls.lock().unwrap().push(identifiers.clone());
        let mut guard = DropCount(&gated.dropped, false);
        gated.permits.acquire().await.expect("open").forget();
        guard.1 = true;
        Ok(identifiers
            .iter()
            .map(|id| Verdict {
                allowed: true,
                decisions: Vec::new(),
                atomic: true,
                decided_at_ms: id.rsplit('-').next().unwrap().parse().unwrap(),
                listed: Vec::new(),
            })
            .collect())
    }
}

/// Lets every spawned task of a current-thread runtime run up to its next wait.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

type Caller = tokio::task::JoinHandle<Result<Vec<Verdict>, StoreError>>;

/// Spawns caller `c` (one check, `…-{c * 1000}`, one shared instant) on `store`.
fn spawn_caller(store: &Arc<Coalescing<GatedRef>>, c: usize) -> Caller {
    let store = store.clone();
    let limit = Limit::new("api", "fixed 100/1s".parse::<Policy>().unwrap());
    tokio::spawn(async move {
        let check = Check::single(&limit, format!("caller-{}", c * 1000), 1);
        store.check(&[check], TimeSource::At(BASE_MS)).await
    })
}

/// Caller A's batch is out when B, C and D queue; once it answers, B leads the batch [B, C, D].
/// Returns the store and the three followers' tasks, B's batch in flight.
async fn second_batch_in_flight(gated: &Arc<Gated>) -> (Arc<Coalescing<GatedRef>>, [Caller; 3]) {
    let store = Arc::new(Coalescing::new(GatedRef(gated.clone())));
    let a = spawn_caller(&store, 1);
    settle().await;
    let followers = [2, 3, 4].map(|c| spawn_caller(&store, c));
    settle().await;
    gated.release();
    assert_eq!(a.await.unwrap().unwrap()[0].decided_at_ms, 1000);
    settle().await;
    assert_eq!(
        gated.sent(),
        [
            vec!["caller-1000"],
            vec!["caller-2000", "caller-3000", "caller-4000"]
        ],
        "B leads the batch of B, C and D"
    );
    (store, followers)
}

#[tokio::test(flavor = "current_thread")]
async fn a_leader_cancelled_mid_flight_leaves_its_followers_their_real_verdicts() {
    let gated = Gated::new();
    let (store, [b, c, d]) = second_batch_in_flight(&gated).await;
    b.abort();
    assert!(b.await.unwrap_err().is_cancelled());
    settle().await;
    // Whichever follower drives the round trip now is cancelled too: the last one still
    // gets its verdict.
    c.abort();
    assert!(c.await.unwrap_err().is_cancelled());
    settle().await;
    gated.release();
    let verdicts = d.await.unwrap().expect("the real verdict, not an error");
    assert_eq!(verdicts[0].decided_at_ms, 4000);
    assert_eq!(gated.sent().len(), 2, "nothing was sent again");
    assert_eq!(
        gated.dropped.load(Ordering::SeqCst),
        0,
        "the round trip ran"
    );
    // The lead came back: a later caller is served.
    let e = spawn_caller(&store, 5);
    settle().await;
    gated.release();
    assert_eq!(e.await.unwrap().unwrap()[0].decided_at_ms, 5000);
    assert!(format!("{store:?}").contains("waiting: 0, leads: 0"));
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_whose_callers_are_all_cancelled_is_dropped_and_gives_its_lead_back() {
    let gated = Gated::new();
    let (store, followers) = second_batch_in_flight(&gated).await;
    for f in followers {
        f.abort();
        assert!(f.await.unwrap_err().is_cancelled());
        settle().await;
    }
    assert_eq!(
        gated.dropped.load(Ordering::SeqCst),
        1,
        "nobody left to wait"
    );
    let e = spawn_caller(&store, 5);
    settle().await;
    gated.release();
    assert_eq!(e.await.unwrap().unwrap()[0].decided_at_ms, 5000);
    assert!(format!("{store:?}").contains("waiting: 0, leads: 0"));
}

/// Many callers, in many batches, several in flight, with one caller in three cancelled at a
/// random point: every caller not cancelled gets its own verdicts, and every lead comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_cancelled_anywhere_never_fail_the_others() {
    let fake = Arc::new(Fake::default());
    fake.open();
    let store = Arc::new(Coalescing::new(FakeRef(fake.clone())).with_in_flight(2));
    let limit = Limit::new("api", "fixed 100/1s".parse::<Policy>().unwrap());
    for wave in 0..20u64 {
        let tasks: Vec<_> = (0..30)
            .map(|c| {
                let (store, limit) = (store.clone(), limit.clone());
                tokio::spawn(async move {
                    let (checks, time) = caller(&limit, c, 1 + c % 2);
                    store.check(&checks, time).await
                })
            })
            .collect();
        // Cancel one caller in three, after a pause that varies with the wave.
        tokio::time::sleep(std::time::Duration::from_micros(50 * (wave % 7))).await;
        for (c, t) in tasks.iter().enumerate() {
            if c % 3 == 0 {
                t.abort();
            }
        }
        for (c, t) in tasks.into_iter().enumerate() {
            match t.await {
                Ok(answer) => {
                    let verdicts = answer.unwrap_or_else(|e| panic!("caller {c}: {e}"));
                    let expected: Vec<u64> =
                        (0..1 + c % 2).map(|j| (c * 1000 + j) as u64).collect();
                    let got: Vec<u64> = verdicts.iter().map(|v| v.decided_at_ms).collect();
                    assert_eq!(got, expected, "caller {c} of wave {wave}");
                }
                Err(e) => assert!(e.is_cancelled() && c % 3 == 0, "caller {c}: {e}"),
            }
        }
        let state = format!("{store:?}");
        assert!(
            state.contains("waiting: 0, leads: 0"),
            "wave {wave}: every lead given back: {state}"
        );
    }
}
