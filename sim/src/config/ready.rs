//! The replay's futures: the Worker's request path and the admin CLI's commands are async, but
//! over the replay's own store nothing ever waits, so each is polled once, on this thread.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use crate::error::SimError;

/// Polls a future that must be ready at once: the replay store never waits.
pub(super) fn ready<F: Future>(future: F) -> Result<F::Output, SimError> {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => Ok(out),
        Poll::Pending => Err(SimError::Store(
            "the replay's in-memory store did not answer at once".into(),
        )),
    }
}
