//! Which replay thread each request of a trace goes to, so that threads share no state: a first
//! pass over the trace joins every two requests that touch a common state — a limit's
//! identifier, or the bucket shared by requests without one — into one group (a union-find over
//! the identifiers' hashes), then gives whole groups to threads, largest first, each to the
//! thread with the fewest requests so far. Requests that match no limit touch no state and fill
//! the threads up one by one. The same trace and thread count always give the same assignment.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use edgelimit_engine::Config;
use rustc_hash::FxBuildHasher;

use super::extract::Extracted;
use crate::readers::Request;

/// No state: a request that matches no limit.
const NO_GROUP: u32 = u32::MAX;

/// Groups of requests sharing state, found request by request.
#[derive(Debug)]
pub struct Grouping {
    extracted: Extracted,
    /// Each state key's node.
    nodes: HashMap<u64, u32, FxBuildHasher>,
    /// Each node's parent (a root is its own).
    parent: Vec<u32>,
    /// Per request in trace order: a node of its group, or [`NO_GROUP`].
    requests: Vec<u32>,
    keys: Vec<u64>,
    /// The first time a request matched a rule, if one did.
    first_matched_ms: Option<u64>,
    latest_ms: u64,
    step_back_ms: u64,
}

/// Which thread replays each request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Per request in trace order: its thread.
    pub thread_of: Vec<u32>,
    /// Requests per thread.
    pub requests: Vec<u64>,
    /// Groups of requests sharing state.
    pub groups: u64,
    /// Requests in the largest group: no thread can replay fewer than these.
    pub largest_group: u64,
    /// The first time a request matched a rule, if one did (where the charts start).
    pub first_matched_ms: Option<u64>,
    /// How far the trace's clock stepped back at most (ms).
    pub step_back_ms: u64,
}

impl Grouping {
    /// An empty grouping for `config`'s limits.
    pub fn new(config: &Config) -> Grouping {
        Grouping {
            extracted: Extracted::new(config),
            nodes: HashMap::default(),
            parent: Vec::new(),
            requests: Vec::new(),
            keys: Vec::new(),
            first_matched_ms: None,
            latest_ms: 0,
            step_back_ms: 0,
        }
    }

    /// The next request of the trace.
    pub fn add(&mut self, config: &Config, request: &Request) {
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        let matched = self.extracted.state_keys(config, request, &mut keys);
        self.add_keys(request.time_ms, matched, &keys);
        self.keys = keys;
    }

    /// The next request of the trace: its time, whether it matched a rule, and its state keys
    /// (`Extracted::state_keys`).
    fn add_keys(&mut self, time_ms: u64, matched: bool, keys: &[u64]) {
        self.step_back_ms = self
            .step_back_ms
            .max(self.latest_ms.saturating_sub(time_ms));
        self.latest_ms = self.latest_ms.max(time_ms);
        if matched && self.first_matched_ms.is_none() {
            self.first_matched_ms = Some(time_ms);
        }
        let mut group = NO_GROUP;
        for &key in keys {
            let next = self.parent.len() as u32;
            let node = *self.nodes.entry(key).or_insert(next);
            if node == next {
                self.parent.push(next);
            }
            group = match group {
                NO_GROUP => self.root(node),
                group => self.join(group, node),
            };
        }
        self.requests.push(group);
    }

    /// The root of `node`'s group, halving the path there.
    fn root(&mut self, mut node: u32) -> u32 {
        while self.parent[node as usize] != node {
            let grand = self.parent[self.parent[node as usize] as usize];
            self.parent[node as usize] = grand;
            node = grand;
        }
        node
    }

    /// Joins the groups of `a` (a root) and `b`; the joined group's root.
    fn join(&mut self, a: u32, b: u32) -> u32 {
        let b = self.root(b);
        if a == b {
            return a;
        }
        // The older root stays: roots only ever point to older nodes, so paths stay short.
        let (keep, leave) = if a < b { (a, b) } else { (b, a) };
        self.parent[leave as usize] = keep;
        keep
    }

    /// Gives whole groups to `threads` threads (at least one), balanced by requests.
    pub fn assign(mut self, threads: usize) -> Assignment {
        let threads = threads.max(1);
        let mut requests = std::mem::take(&mut self.requests);
        // Each request's group by its root, and each group's size and first request.
        let mut groups: HashMap<u32, (u64, usize), FxBuildHasher> = HashMap::default();
        for (at, group) in requests.iter_mut().enumerate() {
            if *group == NO_GROUP {
                continue;
            }
            *group = self.root(*group);
            groups.entry(*group).or_insert((0, at)).0 += 1;
        }
        let mut order: Vec<(u32, u64, usize)> =
            groups.iter().map(|(&g, &(n, at))| (g, n, at)).collect();
        // Largest first; of equal sizes, the one seen first.
        order.sort_unstable_by_key(|&(_, n, at)| (Reverse(n), at));
        let mut load: BinaryHeap<(Reverse<u64>, Reverse<u32>)> = (0..threads as u32)
            .map(|t| (Reverse(0), Reverse(t)))
            .collect();
        let mut thread_of_group: HashMap<u32, u32, FxBuildHasher> = HashMap::default();
        for &(group, n, _) in &order {
            let (Reverse(sum), Reverse(thread)) = load.pop().expect("a thread");
            thread_of_group.insert(group, thread);
            load.push((Reverse(sum + n), Reverse(thread)));
        }
        for group in &mut requests {
            *group = match thread_of_group.get(group) {
                Some(&thread) => thread,
                None => {
                    let (Reverse(sum), Reverse(thread)) = load.pop().expect("a thread");
                    load.push((Reverse(sum + 1), Reverse(thread)));
                    thread
                }
            };
        }
        let mut per_thread = vec![0u64; threads];
        for &thread in &requests {
            per_thread[thread as usize] += 1;
        }
        Assignment {
            thread_of: requests,
            requests: per_thread,
            groups: order.len() as u64,
            largest_group: order.first().map_or(0, |g| g.1),
            first_matched_ms: self.first_matched_ms,
            step_back_ms: self.step_back_ms,
        }
    }
}

/// Requests handed to an extracting thread at a time.
const BLOCK: usize = 1 << 10;

/// Blocks in flight per extracting thread.
const QUEUE: usize = 8;

/// A block of requests and, once extracted, each one's state keys: per request, whether it
/// matched a rule and how many keys it has, then all the keys in order.
#[derive(Debug, Default)]
struct Keyed {
    requests: Vec<Request>,
    counts: Vec<(bool, u32)>,
    keys: Vec<u64>,
}

/// [`Grouping`] with the identifiers extracted on other threads: the reading thread hands
/// blocks of requests round, each thread extracts their state keys, and the groups are joined
/// in trace order as the blocks come back — what [`Grouping::add`] finds, the extraction (an
/// API key's hash, a header's parse) off the reading thread.
#[derive(Debug)]
pub struct ThreadedGrouping {
    grouping: Grouping,
    senders: Vec<SyncSender<Keyed>>,
    receivers: Vec<Receiver<Keyed>>,
    workers: Vec<JoinHandle<()>>,
    block: Keyed,
    /// Blocks sent and joined so far (block `b` goes to thread `b` modulo the threads).
    sent: usize,
    joined: usize,
    /// Emptied blocks, to fill again.
    free: Vec<Keyed>,
}

impl ThreadedGrouping {
    /// Groups `config`'s requests with `threads` threads extracting (at least one).
    pub fn new(config: &Config, threads: usize) -> ThreadedGrouping {
        let threads = threads.max(1);
        let (mut senders, mut receivers, mut workers) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..threads {
            let (tx, rx) = sync_channel::<Keyed>(QUEUE);
            let (done_tx, done_rx) = sync_channel::<Keyed>(QUEUE);
            let config = config.clone();
            workers.push(std::thread::spawn(move || {
                let mut extracted = Extracted::new(&config);
                for mut block in rx {
                    block.counts.clear();
                    block.keys.clear();
                    for request in &block.requests {
                        let before = block.keys.len();
                        let matched = extracted.state_keys(&config, request, &mut block.keys);
                        block
                            .counts
                            .push((matched, (block.keys.len() - before) as u32));
                    }
                    if done_tx.send(block).is_err() {
                        return;
                    }
                }
            }));
            senders.push(tx);
            receivers.push(done_rx);
        }
        ThreadedGrouping {
            grouping: Grouping::new(config),
            senders,
            receivers,
            workers,
            block: Keyed::default(),
            sent: 0,
            joined: 0,
            free: Vec::new(),
        }
    }

    /// The next request of the trace; `reuse` receives requests done with.
    pub fn add(&mut self, request: Request, reuse: impl FnMut(Request)) {
        self.block.requests.push(request);
        if self.block.requests.len() == BLOCK {
            self.send(reuse);
        }
    }

    /// Hands the block over, joining the oldest block back first when every thread has its
    /// fill.
    fn send(&mut self, mut reuse: impl FnMut(Request)) {
        let threads = self.senders.len();
        if self.sent - self.joined == threads * QUEUE {
            self.join_next(&mut reuse);
        }
        let next = self.free.pop().unwrap_or_default();
        let block = std::mem::replace(&mut self.block, next);
        // A thread gone (it panicked) is found when its block is awaited.
        let _ = self.senders[self.sent % threads].send(block);
        self.sent += 1;
    }

    /// Joins the groups of the oldest block handed over.
    fn join_next(&mut self, reuse: &mut impl FnMut(Request)) {
        let threads = self.receivers.len();
        let Ok(mut block) = self.receivers[self.joined % threads].recv() else {
            panic!("a thread extracting identifiers stopped");
        };
        self.joined += 1;
        let mut at = 0;
        for (request, &(matched, n)) in block.requests.iter().zip(&block.counts) {
            let keys = &block.keys[at..at + n as usize];
            at += n as usize;
            self.grouping.add_keys(request.time_ms, matched, keys);
        }
        for request in block.requests.drain(..) {
            reuse(request);
        }
        self.free.push(block);
    }

    /// Gives whole groups to `threads` threads (see [`Grouping::assign`]) once every request
    /// is joined; `reuse` receives the last requests.
    pub fn assign(mut self, threads: usize, mut reuse: impl FnMut(Request)) -> Assignment {
        if !self.block.requests.is_empty() {
            self.send(&mut reuse);
        }
        while self.joined < self.sent {
            self.join_next(&mut reuse);
        }
        self.senders.clear();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
        self.grouping.assign(threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::request;

    fn config() -> Config {
        edgelimit_engine::config::file::parse(
            r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [
  { name = "per-ip", policy = "fixed 5/1s", identifier = "ip" },
  { name = "per-user", policy = "fixed 5/1s", identifier = "header:x-user", missing = "allow" },
]
"#,
            "test",
        )
        .unwrap()
    }

    fn with_user(ip: &str, user: Option<&str>, t: u64) -> Request {
        let mut r = request(ip, t);
        if let Some(user) = user {
            r.add_header(b"x-user", user.as_bytes());
        }
        r
    }

    #[test]
    fn requests_sharing_any_identifier_go_to_one_thread() {
        let config = config();
        let mut grouping = Grouping::new(&config);
        // a and b share user u1; c alone; d and e share user u2 (e's address is new).
        let requests = [
            with_user("192.0.2.1", Some("u1"), 1),
            with_user("192.0.2.2", None, 2),
            with_user("192.0.2.3", None, 3),
            with_user("192.0.2.2", Some("u1"), 4),
            with_user("192.0.2.4", Some("u2"), 5),
            with_user("192.0.2.5", Some("u2"), 6),
            with_user("192.0.2.3", None, 7),
        ];
        for r in &requests {
            grouping.add(&config, r);
        }
        let a = grouping.assign(2);
        let t = &a.thread_of;
        assert_eq!((t[0], t[1]), (t[3], t[3]));
        assert_eq!(t[2], t[6]);
        assert_eq!(t[4], t[5]);
        assert_eq!(a.groups, 3);
        assert_eq!(a.largest_group, 3);
        // The largest group (3 requests) on thread 0, the next two (2 each) on thread 1 then 1.
        assert_eq!(a.requests, vec![3, 4]);
        assert_eq!(a.first_matched_ms, Some(1));
    }

    #[test]
    fn identifiers_extracted_on_threads_group_as_on_one() {
        let config = config();
        let requests: Vec<Request> = (0..5000u64)
            .map(|i| {
                // Address k shares its user with the addresses equal to it modulo 20.
                let k = i * 7 % 251;
                let user = (i % 3 == 0).then(|| format!("u{}", k % 20));
                with_user(&format!("192.0.2.{k}"), user.as_deref(), i)
            })
            .collect();
        let mut one = Grouping::new(&config);
        requests.iter().for_each(|r| one.add(&config, r));
        let one = one.assign(3);
        for threads in [1, 2, 3] {
            let mut many = ThreadedGrouping::new(&config, threads);
            let mut back = 0;
            for r in &requests {
                many.add(r.clone(), |_| back += 1);
            }
            let many = many.assign(3, |_| back += 1);
            assert_eq!(many, one, "{threads} threads");
            assert_eq!(back, requests.len());
        }
        assert_eq!(one.groups, 20);
        assert!(one.requests.iter().all(|&n| n > 0));
    }

    #[test]
    fn a_shared_bucket_for_missing_identifiers_is_one_state() {
        let config = edgelimit_engine::config::file::parse(
            r#"
[[rules]]
name = "api"
limits = [{ name = "per-user", policy = "fixed 5/1s", identifier = "header:x-user" }]
"#,
            "test",
        )
        .unwrap();
        let mut grouping = Grouping::new(&config);
        for (i, user) in [None, Some("a"), None, Some("b")].into_iter().enumerate() {
            grouping.add(&config, &with_user("192.0.2.1", user, i as u64 + 1));
        }
        let a = grouping.assign(4);
        assert_eq!(a.thread_of[0], a.thread_of[2]);
        assert_eq!(a.groups, 3);
        assert_eq!(a.largest_group, 2);
    }
}
