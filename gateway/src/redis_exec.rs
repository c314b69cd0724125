//! Running commands on Redis: the shared connections, one round trip per request, and coming back
//! by itself when Redis restarts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, IntoConnectionInfo, RedisError, RedisResult, Value};

use crate::acl::AclUser;
use crate::command::Command;
use crate::config::{Config, RedisAcl};
use crate::error::GatewayError;

/// How long opening a connection to Redis may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long Redis may take to answer a round trip.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which connection a round trip takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// One of the connections shared round-robin by single commands and pipelines.
    Shared,
    /// The connection of its own that transactions take, so MULTI…EXEC never shares a socket
    /// with the pipelines of other requests.
    Transaction,
}

/// The connections of one generation: replaced whole when the ACL user had to be made again.
struct Connections {
    shared: Vec<ConnectionManager>,
    transaction: ConnectionManager,
}

/// The gateway's side of Redis.
pub struct RedisExec {
    /// Connects as the user commands run as: the ACL user, or the URL's own.
    client: redis::Client,
    /// With [`RedisAcl::Create`]: the URL's own user, who makes the ACL user, and that user.
    admin: Option<(redis::Client, AclUser)>,
    count: usize,
    connections: RwLock<Arc<Connections>>,
    next: AtomicUsize,
    /// One recovery at a time: the requests failing together wait for it, then use its result.
    recovery: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for RedisExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisExec")
            .field("connections", &self.count)
            .field(
                "acl_user",
                &self.admin.as_ref().map(|(_, user)| user.name()),
            )
            .finish()
    }
}

impl RedisExec {
    /// Connects `config.connections` shared connections and the transaction connection, after
    /// creating the ACL user when `config.redis_acl` asks for it.
    pub async fn connect(config: &Config) -> Result<RedisExec, GatewayError> {
        let url = edgelimit::redact::redact(&config.redis_url).into_owned();
        let redis_error = |source| GatewayError::Redis {
            url: url.clone(),
            source,
        };
        let info = config
            .redis_url
            .as_str()
            .into_connection_info()
            .map_err(redis_error)?;
        let admin_client = redis::Client::open(info.clone()).map_err(redis_error)?;
        let (client, admin) = match &config.redis_acl {
            RedisAcl::Off => (admin_client, None),
            RedisAcl::Create { user } => {
                let user = AclUser::new(
                    user,
                    &config.allowed,
                    &config.token,
                    info.redis_settings().db(),
                );
                let mut admin = admin_client
                    .get_multiplexed_async_connection_with_config(&connection_config())
                    .await
                    .map_err(redis_error)?;
                let unknown = user.create(&mut admin).await?;
                if !unknown.is_empty() {
                    tracing::warn!(
                        ?unknown,
                        "allowed commands this Redis does not know, left out of the ACL"
                    );
                }
                tracing::info!(
                    user = user.name(),
                    "commands run as a Redis ACL user allowed exactly the allow-list"
                );
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_username(user.name())
                    .set_password(user.password());
                let client = redis::Client::open(info.clone().set_redis_settings(settings))
                    .map_err(redis_error)?;
                (client, Some((admin_client, user)))
            }
        };
        let count = config.connections.max(1);
        let mut shared = Vec::with_capacity(count);
        for _ in 0..count {
            shared.push(
                ConnectionManager::new_with_config(client.clone(), manager_config())
                    .await
                    .map_err(redis_error)?,
            );
        }
        let transaction = ConnectionManager::new_with_config(client.clone(), manager_config())
            .await
            .map_err(redis_error)?;
        Ok(RedisExec {
            client,
            admin,
            count,
            connections: RwLock::new(Arc::new(Connections {
                shared,
                transaction,
            })),
            next: AtomicUsize::new(0),
            recovery: tokio::sync::Mutex::new(()),
        })
    }

    /// Sends `pipe` on a connection of `lane` and reads every reply (a command's own error is
    /// its reply; an `Err` is a failure to talk to Redis at all).
    pub async fn round_trip(&self, pipe: &redis::Pipeline, lane: Lane) -> RedisResult<Vec<Value>> {
        let (generation, mut connection) = self.pick(lane);
        match pipe.query_async(&mut connection).await {
            // The connection could not log in: nothing ran, so once the user exists again the
            // same round trip is safe to send once more.
            Err(e) if self.admin.is_some() && lost_login(&e) => {
                if !self.recover(&generation).await {
                    return Err(e);
                }
                let (_, mut connection) = self.pick(lane);
                pipe.query_async(&mut connection).await
            }
            result => result,
        }
    }

    fn pick(&self, lane: Lane) -> (Arc<Connections>, ConnectionManager) {
        let generation = self
            .connections
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let connection = match lane {
            Lane::Shared => {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % generation.shared.len();
                generation.shared[i].clone()
            }
            Lane::Transaction => generation.transaction.clone(),
        };
        (generation, connection)
    }

    /// Makes the ACL user again (a restarted Redis has forgotten it, and connections opening as
    /// it fail to log in, for good) and replaces every connection. Whether `failed` has been
    /// replaced, by this call or a concurrent one.
    async fn recover(&self, failed: &Arc<Connections>) -> bool {
        let Some((admin, user)) = &self.admin else {
            return false;
        };
        let _one_at_a_time = self.recovery.lock().await;
        let current = self
            .connections
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if !Arc::ptr_eq(&current, failed) {
            return true;
        }
        let created = match admin
            .get_multiplexed_async_connection_with_config(&connection_config())
            .await
        {
            Ok(mut connection) => user
                .create(&mut connection)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = created {
            tracing::warn!(error = %e, "cannot make the Redis ACL user again");
            return false;
        }
        let lazy =
            || ConnectionManager::new_lazy_with_config(self.client.clone(), manager_config());
        let fresh = (0..self.count)
            .map(|_| lazy())
            .collect::<RedisResult<Vec<_>>>()
            .and_then(|shared| {
                Ok(Connections {
                    shared,
                    transaction: lazy()?,
                })
            });
        match fresh {
            Ok(fresh) => {
                *self.connections.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
                tracing::info!(
                    user = user.name(),
                    "made the Redis ACL user again after Redis forgot it"
                );
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot reconnect to Redis");
                false
            }
        }
    }
}

/// Whether a connection failed to log in (`WRONGPASS`, `NOAUTH`): the ACL user is gone.
fn lost_login(e: &RedisError) -> bool {
    let text = e.to_string();
    e.kind() == ErrorKind::AuthenticationFailed
        || text.contains("WRONGPASS")
        || text.contains("NOAUTH")
}

fn connection_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(1)
}

/// A command as the redis crate sends it.
pub fn to_cmd(command: &Command) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    // As `redis::cmd(name)` would: the name as text (borrowed when it is valid UTF-8).
    cmd.arg(String::from_utf8_lossy(&command[0]).as_bytes());
    for arg in &command[1..] {
        cmd.arg(arg.as_slice());
    }
    cmd
}
