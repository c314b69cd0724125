//! Clients spread over threads: each thread takes a contiguous run of client ids holding about
//! the same number of requests, and the results come back in client order, so what is computed
//! never depends on how many threads computed it.

use super::traffic::Traffic;

/// `work(c)` for every client `c` of `traffic`, in client order, on up to `threads` threads.
pub(super) fn per_client<T: Send>(
    traffic: &Traffic,
    threads: usize,
    work: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let clients = traffic.clients();
    let threads = threads.clamp(1, clients.max(1));
    if threads == 1 {
        return (0..clients).map(work).collect();
    }
    let share = traffic.requests().div_ceil(threads as u64).max(1);
    let mut bounds = vec![0usize];
    let mut held = 0u64;
    for c in 0..clients {
        held += traffic.client(c).len() as u64;
        if held >= share && bounds.len() < threads {
            bounds.push(c + 1);
            held = 0;
        }
    }
    if *bounds.last().unwrap_or(&0) != clients {
        bounds.push(clients);
    }
    let work = &work;
    std::thread::scope(|scope| {
        let parts: Vec<_> = bounds
            .windows(2)
            .map(|w| {
                let (from, to) = (w[0], w[1]);
                scope.spawn(move || (from..to).map(work).collect::<Vec<T>>())
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("a search thread panicked"))
            .collect()
    })
}

/// The sum of `work(c)` over every client, on up to `threads` threads.
pub(super) fn sum_clients(
    traffic: &Traffic,
    threads: usize,
    work: impl Fn(usize) -> u64 + Sync,
) -> u64 {
    per_client(traffic, threads, work).into_iter().sum()
}
