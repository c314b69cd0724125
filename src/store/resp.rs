//! `RespStore`: the Lua twins on a real Redis or Redis Cluster over RESP (the `redis` crate).
//! Native only: the crate's sockets do not exist on wasm32 (the Worker uses the REST store).
//!
//! A batch is one pipeline of `EVALSHA`s, planned by [`crate::script::CheckPlan`]. A Cluster
//! pipeline may only address one slot, so there the batch becomes one pipeline per slot, sent
//! concurrently; the checks of one key share a slot and so keep their order.
//!
//! `NOSCRIPT` (the server's script cache was flushed or never filled) is handled within the same
//! call: exactly the calls that failed with it are sent again, now as `EVAL` with the source — a
//! `NOSCRIPT` reply means nothing ran, so nothing is counted twice.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::try_join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, Value};

use super::batch::{self, Gated};
use super::check::{Check, TimeSource, Verdict};
use super::error::StoreError;
use super::key::DEFAULT_NAMESPACE;
use super::redis_control::{redis_control, RedisCalls};
use super::traits::Store;
use super::upstash::{sent_with_source, LoadedScripts};
use crate::control::list;
use crate::global::take::{take_by_checks, Take, Taken};
use crate::script::{
    control, is_noscript, read_taken, take_invocation, CheckPlan, Invocation, Reply, Topology,
};

#[derive(Clone)]
enum Connection {
    // The manager reconnects by itself after Redis restarts; a plain multiplexed connection
    // would stay broken.
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// A [`Store`] on Redis or Redis Cluster over RESP. Cheap to clone (connections are shared and
/// multiplexed); safe to use from many tasks at once.
#[derive(Clone)]
pub struct RespStore {
    connection: Connection,
    namespace: String,
    timeout: Duration,
    // The scripts the single node holds (clones share them).
    loaded: std::sync::Arc<LoadedScripts>,
}

impl fmt::Debug for RespStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RespStore")
            .field(
                "topology",
                &match self.connection {
                    Connection::Single(_) => Topology::SingleNode,
                    Connection::Cluster(_) => Topology::Cluster,
                },
            )
            .field("namespace", &self.namespace)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RespStore {
    /// How long a connection attempt or a reply may take by default.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

    /// Connects to one Redis (`redis://[user:password@]host:port/[db]`), with
    /// [`RespStore::DEFAULT_TIMEOUT`] for connecting and for each reply.
    pub async fn connect(url: &str) -> Result<RespStore, StoreError> {
        RespStore::connect_with_timeout(url, RespStore::DEFAULT_TIMEOUT).await
    }

    /// [`RespStore::connect`] with another timeout.
    pub async fn connect_with_timeout(
        url: &str,
        timeout: Duration,
    ) -> Result<RespStore, StoreError> {
        let client = redis::Client::open(url).map_err(StoreError::from)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let manager = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(StoreError::from)?;
        Ok(RespStore {
            connection: Connection::Single(manager),
            namespace: DEFAULT_NAMESPACE.to_string(),
            timeout,
            loaded: Default::default(),
        })
    }

    /// Connects to a Redis Cluster given some of its nodes' URLs, with [`RespStore::DEFAULT_TIMEOUT`].
    pub async fn connect_cluster<S: AsRef<str>>(nodes: &[S]) -> Result<RespStore, StoreError> {
        RespStore::connect_cluster_with_timeout(nodes, RespStore::DEFAULT_TIMEOUT).await
    }

    /// [`RespStore::connect_cluster`] with another timeout.
    pub async fn connect_cluster_with_timeout<S: AsRef<str>>(
        nodes: &[S],
        timeout: Duration,
    ) -> Result<RespStore, StoreError> {
        let client = ClusterClient::builder(nodes.iter().map(|n| n.as_ref().to_string()))
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()
            .map_err(StoreError::from)?;
        let connection = client
            .get_async_connection()
            .await
            .map_err(StoreError::from)?;
        Ok(RespStore {
            connection: Connection::Cluster(connection),
            namespace: DEFAULT_NAMESPACE.to_string(),
            timeout,
            loaded: Default::default(),
        })
    }

    /// The same store keeping its keys under `namespace` (escaped into every key's hash tag).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> RespStore {
        self.namespace = namespace.into();
        self
    }

    /// The namespace keys live under.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn topology(&self) -> Topology {
        match self.connection {
            Connection::Single(_) => Topology::SingleNode,
            Connection::Cluster(_) => Topology::Cluster,
        }
    }

    /// Sends one plain command (e.g. `GET`, `SET`, `DEL` of a control key) to the node owning
    /// its key and returns its reply.
    async fn command(&self, parts: &[String]) -> Result<Reply, StoreError> {
        let mut cmd = redis::cmd(&parts[0]);
        cmd.arg(&parts[1..]);
        let mut pipe = redis::pipe();
        pipe.add_command(cmd);
        let values = match &self.connection {
            Connection::Single(manager) => query(pipe, &mut manager.clone(), self.timeout).await?,
            Connection::Cluster(cluster) => query(pipe, &mut cluster.clone(), self.timeout).await?,
        };
        Ok(expect_len(values, 1)?.remove(0))
    }

    /// Runs the invocations as pipelines and returns one reply per invocation, in order.
    async fn run(&self, invocations: &[&Invocation]) -> Result<Vec<Reply>, StoreError> {
        let timeout = self.timeout;
        match &self.connection {
            Connection::Single(manager) => {
                run_pipeline(invocations, Some(&self.loaded), |pipe| {
                    let mut manager = manager.clone();
                    async move { query(pipe, &mut manager, timeout).await }
                })
                .await
            }
            Connection::Cluster(cluster) => {
                // A cluster pipeline must stay within one slot: one pipeline per slot, in parallel.
                let mut by_slot: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
                for (i, invocation) in invocations.iter().enumerate() {
                    by_slot
                        .entry(invocation.slot().unwrap_or(0))
                        .or_default()
                        .push(i);
                }
                let groups = by_slot.into_values().map(|indices| {
                    let cluster = cluster.clone();
                    let group: Vec<&Invocation> = indices.iter().map(|&i| invocations[i]).collect();
                    async move {
                        let replies = run_pipeline(&group, None, |pipe| {
                            let mut cluster = cluster.clone();
                            async move { query(pipe, &mut cluster, timeout).await }
                        })
                        .await?;
                        Ok::<_, StoreError>((indices, replies))
                    }
                });
                let mut replies = vec![Reply::Nil; invocations.len()];
                for (indices, group) in try_join_all(groups).await? {
                    for (i, reply) in indices.into_iter().zip(group) {
                        replies[i] = reply;
                    }
                }
                Ok(replies)
            }
        }
    }
}

/// Sends the invocations as one `EVALSHA` pipeline (the first call of a script not known to be
/// `loaded` with calls after it by `EVAL`, so the batch runs in order: see
/// [`sent_with_source`]), then re-sends those that came back `NOSCRIPT` as one `EVAL` pipeline.
/// `loaded` is `None` on a Cluster, whose nodes each hold their own scripts.
async fn run_pipeline<F, Fut>(
    invocations: &[&Invocation],
    loaded: Option<&LoadedScripts>,
    send: F,
) -> Result<Vec<Reply>, StoreError>
where
    F: Fn(Pipeline) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Value>, StoreError>>,
{
    let mut pipe = redis::pipe();
    let with_source = sent_with_source(invocations, loaded);
    for (invocation, source) in invocations.iter().zip(with_source) {
        pipe.add_command(if source {
            command("EVAL", invocation.script.source(), invocation)
        } else {
            command("EVALSHA", invocation.script.sha1(), invocation)
        });
    }
    let mut replies: Vec<Reply> = expect_len(send(pipe).await?, invocations.len())?;
    if let Some(loaded) = loaded {
        loaded.note(invocations, &replies);
    }
    let missing: Vec<usize> = replies
        .iter()
        .enumerate()
        .filter_map(|(i, r)| matches!(r, Reply::Error(m) if is_noscript(m)).then_some(i))
        .collect();
    if !missing.is_empty() {
        let mut pipe = redis::pipe();
        for &i in &missing {
            let invocation = invocations[i];
            pipe.add_command(command("EVAL", invocation.script.source(), invocation));
        }
        for (i, reply) in missing
            .iter()
            .zip(expect_len(send(pipe).await?, missing.len())?)
        {
            replies[*i] = reply;
        }
    }
    Ok(replies)
}

fn command(verb: &str, script: &str, invocation: &Invocation) -> Cmd {
    let mut cmd = redis::cmd(verb);
    let keys = invocation.keys();
    cmd.arg(script).arg(keys.len());
    for part in keys.iter().chain(invocation.args()) {
        cmd.arg(part);
    }
    cmd
}

async fn query<C: redis::aio::ConnectionLike>(
    mut pipe: Pipeline,
    connection: &mut C,
    timeout: Duration,
) -> Result<Vec<Value>, StoreError> {
    // Per-command errors come back as values, so one failing script does not hide the replies
    // of the others (which did run).
    pipe.ignore_errors()
        .query_async::<Vec<Value>>(connection)
        .await
        .map_err(|e| {
            if e.is_timeout() {
                StoreError::Timeout {
                    after_ms: timeout.as_millis() as u64,
                }
            } else {
                StoreError::from(e)
            }
        })
}

fn expect_len(values: Vec<Value>, n: usize) -> Result<Vec<Reply>, StoreError> {
    if values.len() != n {
        return Err(StoreError::Protocol(format!(
            "pipeline of {n} commands answered {} replies",
            values.len()
        )));
    }
    Ok(values.into_iter().map(to_reply).collect())
}

/// A RESP value in the transport-neutral form the script module reads.
fn to_reply(value: Value) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(i) => Reply::Int(i),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::SimpleString(s) => Reply::Bulk(s.into_bytes()),
        Value::Okay => Reply::Bulk(b"OK".to_vec()),
        Value::Array(values) | Value::Set(values) => {
            Reply::Array(values.into_iter().map(to_reply).collect())
        }
        Value::ServerError(e) => Reply::Error(match e.details() {
            Some(details) => format!("{} {details}", e.code()),
            None => e.code().to_string(),
        }),
        other => Reply::Error(format!("unexpected reply {other:?}")),
    }
}

impl From<RedisError> for StoreError {
    fn from(e: RedisError) -> StoreError {
        let message = e.to_string();
        // Timeouts, dropped connections and cluster reconfiguration pass: transient.
        if e.is_timeout()
            || e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_cluster_error()
        {
            return StoreError::Unreachable(message);
        }
        match e.kind() {
            ErrorKind::AuthenticationFailed => StoreError::Auth(message),
            ErrorKind::ClusterConnectionNotFound => StoreError::Unreachable(message),
            ErrorKind::InvalidClientConfig => StoreError::InvalidInput(message),
            // A server's error reply: its code classifies it as on every transport.
            ErrorKind::Server(_) | ErrorKind::Extension => {
                StoreError::from_error_code(e.code().unwrap_or(""), message)
            }
            _ => StoreError::Protocol(message),
        }
    }
}

impl RespStore {
    /// Runs one invocation and returns its reply.
    async fn run_one(&self, invocation: &Invocation) -> Result<Reply, StoreError> {
        let mut replies = self.run(&[invocation]).await?;
        replies
            .pop()
            .ok_or_else(|| StoreError::Protocol("a pipeline of one command answered none".into()))
    }

    /// Checks with no gate, or any check on one node: one pipeline (per slot on a Cluster).
    async fn check_planned(
        &self,
        checks: &[Check],
        time: TimeSource,
    ) -> Result<Vec<Verdict>, StoreError> {
        let topology = self.topology();
        let plans = checks
            .iter()
            .map(|check| CheckPlan::controlled(check, &self.namespace, time, topology))
            .collect::<Result<Vec<_>, _>>()?;
        let invocations: Vec<&Invocation> =
            plans.iter().flat_map(|p| p.invocations().iter()).collect();
        let replies = if invocations.is_empty() {
            Vec::new()
        } else {
            self.run(&invocations).await?
        };
        let mut replies = replies.as_slice();
        plans
            .iter()
            .map(|plan| {
                let (mine, rest) = replies.split_at(plan.invocations().len());
                replies = rest;
                plan.verdict(mine)
            })
            .collect()
    }

    /// Gated checks on a Cluster, where each list lives in a slot of its own: every list the
    /// batch names is read first (one `match` call per list and check, all concurrently), then
    /// what no list settled is checked — two round trips, here only (docs/design.md §"Deny and
    /// allow lists").
    async fn check_gated_on_cluster(
        &self,
        checks: &[Check],
        time: TimeSource,
    ) -> Result<Vec<Verdict>, StoreError> {
        // (check, list) per read, in order.
        let mut reads: Vec<(usize, &str)> = Vec::new();
        let mut invocations: Vec<Invocation> = Vec::new();
        let candidates: Vec<&list::Candidates> =
            checks.iter().map(|c| c.probe().candidates()).collect();
        for (c, check) in checks.iter().enumerate() {
            if candidates[c].is_empty() {
                continue; // nothing to match: no list is asked
            }
            for gate in check.gates() {
                for name in gate.lists() {
                    if !reads.iter().any(|&(rc, rl)| rc == c && rl == name) {
                        reads.push((c, name));
                        invocations.push(control::list_match(
                            &self.namespace,
                            name,
                            candidates[c],
                            time,
                        )?);
                    }
                }
            }
        }
        let replies = if invocations.is_empty() {
            Vec::new()
        } else {
            self.run(&invocations.iter().collect::<Vec<_>>()).await?
        };
        let mut hits: Vec<(usize, &str, u64, Option<usize>)> = Vec::with_capacity(reads.len());
        for ((c, name), reply) in reads.into_iter().zip(&replies) {
            let (read_at, first) = control::read_match(reply, candidates[c].len())?;
            hits.push((c, name, read_at, first));
        }
        // What each check becomes: settled by a deny list, or a (rest) check to decide.
        let mut rests: Vec<Check> = Vec::new();
        let mut shapes: Vec<Settled> = Vec::with_capacity(checks.len());
        for (c, check) in checks.iter().enumerate() {
            let mine = || hits.iter().filter(|h| h.0 == c);
            // The lists' clock: the latest read (the caller's time for `TimeSource::At`).
            let now = mine().map(|h| h.2).chain(time.at_ms()).max().unwrap_or(0);
            let listed = list::resolve(check.gates(), candidates[c], |name| {
                mine().find(|h| h.1 == name).and_then(|h| h.3)
            });
            match batch::split_gated(check, listed, now) {
                Gated::Denied(verdict) => shapes.push(Settled::ByList(verdict)),
                Gated::Decide {
                    rest,
                    allowlisted,
                    listed,
                } => {
                    rests.push(rest);
                    shapes.push(Settled::Rest {
                        allowlisted,
                        listed,
                        now,
                    });
                }
            }
        }
        let mut decided = self.check_planned(&rests, time).await?.into_iter();
        shapes
            .into_iter()
            .map(|shape| match shape {
                Settled::ByList(verdict) => Ok(verdict),
                Settled::Rest {
                    allowlisted,
                    listed,
                    now,
                } => {
                    let rest = decided.next().ok_or_else(|| {
                        StoreError::Protocol("a gated check lost its verdict".into())
                    })?;
                    let mut verdict = batch::merge_gated(allowlisted, listed, rest)?;
                    verdict.decided_at_ms = verdict.decided_at_ms.max(now);
                    Ok(verdict)
                }
            })
            .collect()
    }
}

/// A gated check on a Cluster once its lists were read.
enum Settled {
    /// A deny list settled it.
    ByList(Verdict),
    /// The rest is checked next; then the allowlisted decisions go back in their places.
    Rest {
        allowlisted: Vec<Option<crate::Decision>>,
        listed: Vec<list::Listed>,
        now: u64,
    },
}

#[async_trait]
impl Store for RespStore {
    async fn check(&self, checks: &[Check], time: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        if self.topology() == Topology::Cluster && checks.iter().any(Check::is_gated) {
            return self.check_gated_on_cluster(checks, time).await;
        }
        self.check_planned(checks, time).await
    }

    /// One call of the take script on one node; a Cluster, whose takes' keys may span slots,
    /// decides them as checks ([`crate::global::take::take_by_checks`]).
    async fn take(&self, takes: &[Take], time: TimeSource) -> Result<Vec<Taken>, StoreError> {
        if self.topology() == Topology::Cluster {
            return take_by_checks(self, takes, time).await;
        }
        if takes.is_empty() {
            return Ok(Vec::new());
        }
        let invocation = take_invocation(takes, &self.namespace, time)?;
        read_taken(&self.run_one(&invocation).await?, takes.len())
    }
}

#[async_trait]
impl RedisCalls for RespStore {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn plain(&self, command: &[String]) -> Result<Reply, StoreError> {
        self.command(command).await
    }

    async fn script(&self, invocation: &Invocation) -> Result<Reply, StoreError> {
        self.run_one(invocation).await
    }
}

redis_control!(RespStore);
