//! Tokio for tests and benches: a runtime of two worker threads, and a test's concurrent clients
//! as tasks, spawned at once, their outputs gathered in order.

use std::future::Future;

/// A multi-threaded runtime with two worker threads: for servers a test runs in process (the
/// gateway) while the test itself blocks (on a child process, or on a runtime of the code under
/// test), and for a bench's clients.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Spawns each of `futures` as a task (so they run in parallel on a multi-threaded runtime) and
/// awaits them all; their outputs, in the order given. A task that panics fails the caller.
pub async fn join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        outputs.push(handle.await.expect("a task ends without panicking"));
    }
    outputs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn outputs_come_back_in_order() {
        let outputs = join_all((0..5u64).map(|i| async move {
            tokio::time::sleep(std::time::Duration::from_millis(10 * (5 - i))).await;
            i
        }))
        .await;
        assert_eq!(outputs, [0, 1, 2, 3, 4]);
    }
}
