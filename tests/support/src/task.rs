//! A test's concurrent clients as tokio tasks: spawned at once, their outputs gathered in order.

use std::future::Future;

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
