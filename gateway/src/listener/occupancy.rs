//! Who holds the gateway's places: how many connections each client address has open, and which
//! connections have not authenticated yet, so that one can make room for a new connection when
//! every place is taken: the one heard from longest ago. A connection that never sends a byte
//! goes first; a client in the middle of its handshake or request has just been heard from, so a
//! wave of newcomers that send nothing never evicts it, and an attacker who wants to outlast it
//! must keep sending (for at most `unauthenticated_timeout`).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use super::phase::Phase;
use crate::metrics::ConnectionCounters;

/// The open connections, shared by the accept loop (which admits and evicts) and the
/// connections (which leave when they close). Both maps hold only open connections, so neither
/// outgrows the connection caps.
pub(super) struct Occupancy {
    inner: Mutex<Inner>,
    per_address: usize,
    counters: ConnectionCounters,
}

#[derive(Default)]
struct Inner {
    by_address: HashMap<IpAddr, usize>,
    /// Connections by arrival, while they may not have authenticated. One that has is dropped
    /// from here lazily: when eviction meets it, or when it closes. Eviction reads all of them
    /// (at most `max_connections`), only when every place is taken.
    unauthenticated: BTreeMap<u64, Arc<Phase>>,
    next: u64,
}

/// One admitted connection's hold on its address's count and on the open-connection gauge,
/// released when dropped.
pub(super) struct Seat {
    occupancy: Arc<Occupancy>,
    address: IpAddr,
    id: u64,
}

impl Occupancy {
    /// Room for at most `per_address` connections per address (0 counts as 1).
    pub(super) fn new(per_address: usize, counters: ConnectionCounters) -> Arc<Occupancy> {
        Arc::new(Occupancy {
            inner: Mutex::new(Inner::default()),
            per_address: per_address.max(1),
            counters,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing panics while holding it; if something did, the counts are still whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A seat for a connection from `peer`, unless its address holds its most already.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Seat> {
        let address = address_key(peer);
        let mut inner = self.lock();
        let held = inner.by_address.entry(address).or_insert(0);
        if *held >= self.per_address {
            return None;
        }
        *held += 1;
        let id = inner.next;
        inner.next += 1;
        self.counters.open.inc();
        Some(Seat {
            occupancy: self.clone(),
            address,
            id,
        })
    }

    /// Notes that the connection in `seat`, of `phase`, may be evicted until it authenticates.
    pub(super) fn watch(&self, seat: &Seat, phase: Arc<Phase>) {
        self.lock().unauthenticated.insert(seat.id, phase);
    }

    /// Closes the connection not yet authenticated that was heard from longest ago (the oldest
    /// of those heard from at the same time), if there is one; whether there was.
    pub(super) fn evict_unauthenticated(&self) -> bool {
        let mut inner = self.lock();
        inner
            .unauthenticated
            .retain(|_, phase| !phase.is_authenticated());
        let quietest = inner
            .unauthenticated
            .iter()
            .min_by_key(|(id, phase)| (phase.last_heard(), **id))
            .map(|(id, _)| *id);
        match quietest.and_then(|id| inner.unauthenticated.remove(&id)) {
            Some(phase) => {
                phase.evict();
                true
            }
            None => false,
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut inner = self.occupancy.lock();
        inner.unauthenticated.remove(&self.id);
        if let Some(held) = inner.by_address.get_mut(&self.address) {
            *held -= 1;
            if *held == 0 {
                inner.by_address.remove(&self.address);
            }
        }
        self.occupancy.counters.open.dec();
    }
}

/// What a client address counts as: an IPv4 address itself (an IPv4-mapped IPv6 address too),
/// an IPv6 address by its /64, which one host or network usually holds whole.
pub(super) fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_counts_alone_and_ipv6_by_its_64() {
        assert_eq!(address_key(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(address_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(
            address_key(ip("2001:db8:1:2:aaaa::1")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            address_key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")),
            address_key(ip("2001:db8:1:2::9"))
        );
        assert_ne!(
            address_key(ip("2001:db8:1:3::1")),
            address_key(ip("2001:db8:1:2::1"))
        );
    }

    #[test]
    fn each_address_holds_at_most_its_share_and_gets_it_back() {
        let counters = ConnectionCounters::default();
        let occupancy = Occupancy::new(2, counters.clone());
        let a1 = occupancy.admit(ip("10.0.0.1")).unwrap();
        let a2 = occupancy.admit(ip("10.0.0.1")).unwrap();
        assert!(
            occupancy.admit(ip("10.0.0.1")).is_none(),
            "a third from one address"
        );
        let b = occupancy.admit(ip("10.0.0.2"));
        assert!(b.is_some(), "another address has its own share");
        assert_eq!(counters.open(), 3);
        drop(a1);
        let a3 = occupancy.admit(ip("10.0.0.1"));
        assert!(a3.is_some(), "a closed connection frees its place");
        drop((a2, a3, b));
        assert_eq!(counters.open(), 0);
        assert!(
            occupancy.lock().by_address.is_empty(),
            "no address kept once gone"
        );
    }

    #[test]
    fn eviction_takes_the_connection_heard_from_longest_ago_not_authenticated() {
        let occupancy = Occupancy::new(10, ConnectionCounters::default());
        let phases: Vec<_> = (0..4)
            .map(|_| {
                let phase = Arc::new(Phase::new());
                std::thread::sleep(std::time::Duration::from_millis(2));
                phase
            })
            .collect();
        let seats: Vec<_> = phases
            .iter()
            .map(|phase| {
                let seat = occupancy.admit(ip("10.0.0.1")).unwrap();
                occupancy.watch(&seat, phase.clone());
                seat
            })
            .collect();
        phases[0].authenticate();
        // The second is talking (its handshake, say): the third, silent since it opened, goes.
        phases[1].bytes_arrived();
        assert!(occupancy.evict_unauthenticated());
        assert!(!phases[0].is_evicted(), "authenticated: never evicted");
        assert!(!phases[1].is_evicted(), "just heard from");
        assert!(phases[2].is_evicted(), "silent longest");
        assert!(occupancy.evict_unauthenticated());
        assert!(phases[3].is_evicted(), "then the next silent one");
        assert!(occupancy.evict_unauthenticated());
        assert!(phases[1].is_evicted(), "then the talking one");
        drop(seats);
        assert!(!occupancy.evict_unauthenticated(), "none left");
    }
}
