//! Who may hold the secure port's connections, and the memory of those not yet served.
//!
//! The port is reachable by anyone who reaches the node (`hostNetwork`, `0.0.0.0`), and
//! the kubelet's liveness probe is an unauthenticated client like any other. So no small
//! pool of slots exists for an attacker to fill, and nothing is refused to a newcomer:
//! - a connection costs a socket and a small task until its first byte arrives
//!   ([`Phase::Silent`]); connections are bounded only by [`Limits::connections`], which
//!   follows the file descriptor limit (thousands, as a Go server is bounded);
//! - once it sends, a connection reading TLS or a request's headers holds buffers
//!   ([`Phase::Pending`]): each counts [`Limits::pending_cost`] against
//!   [`Limits::pending_bytes`], the memory all such connections may hold together;
//! - a connection whose request headers were read is served ([`Phase::Served`]) and
//!   counts against neither budget until it reads the next request;
//! - when a bound is reached, a connection gives its place to the newcomer: one that
//!   has sent nothing first, then one served (an authenticated client's kept-alive
//!   connection, which reconnects), and a connection reading TLS or headers (as the
//!   probe is) only when no other is left; among those, the oldest of a client holding
//!   more than [`FAIR_SHARE`] of them if one does, else the oldest of all. A flood of
//!   idle or slow connections from one address or from thousands cannot keep a probe
//!   out: the probe, the newest, is the last picked, and the node's own address holding
//!   its liveness and readiness probes at once is not "the heaviest".
//!
//! A place is a [`Ticket`]: dropped, it is free; evicted, its [`Ticket::evicted`] future
//! completes and the connection holding it closes.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// How many connections the port holds, and how much memory those not yet served may.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once, whatever their phase.
    pub connections: usize,
    /// Bytes the connections in [`Phase::Pending`] may hold together.
    pub pending_bytes: usize,
    /// Bytes one connection in [`Phase::Pending`] is counted for: the most it can hold
    /// (TLS buffers and handshake state, and the request headers up to their cap).
    pub pending_cost: usize,
}

impl Limits {
    /// How many [`Phase::Pending`] connections fit in the budget (at least one).
    fn pending(&self) -> usize {
        (self.pending_bytes / self.pending_cost.max(1)).max(1)
    }
}

/// What a connection is doing, which says what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Accepted, nothing read yet: a socket and a task.
    Silent,
    /// Reading its TLS handshake or a request's headers: buffers up to
    /// [`Limits::pending_cost`].
    Pending,
    /// Its request's headers were read: served, or kept alive between requests.
    Served,
}

/// The order in which connections give their places at [`Limits::connections`].
const EVICTION_ORDER: [Phase; 3] = [Phase::Silent, Phase::Served, Phase::Pending];

/// Connections of one phase a client may hold and still count as any other: above it,
/// its oldest goes first (an address holding a flood), below it age alone decides (the
/// node's address holding its probes and a scraper's connection).
pub const FAIR_SHARE: usize = 8;

/// Who a connection counts against: an IPv4 address, or the /64 of an IPv6 one (a
/// host is given a whole /64; an IPv4-mapped address is its IPv4 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientKey(IpAddr);

impl From<IpAddr> for ClientKey {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => ClientKey(ip),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    ClientKey(IpAddr::V6(prefix.into()))
                }
            },
        }
    }
}

/// Which bound made a connection give its place to a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evicted {
    /// [`Limits::connections`]: a connection closed for a new one.
    Connection,
    /// [`Limits::pending_bytes`]: a connection not yet served closed for one that
    /// started to send.
    Pending,
}

impl Evicted {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Evicted::Connection => "evicted-connection",
            Evicted::Pending => "evicted-pending",
        }
    }
}

/// The places of the secure port.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Connections held, by phase (indexed as [`PHASES`]).
    held: [usize; 3],
    clients: HashMap<ClientKey, Client>,
}

/// One client's connections by phase, each by admission order (oldest first).
#[derive(Debug, Default)]
struct Client {
    by_phase: [BTreeSet<u64>; 3],
    slots: HashMap<u64, Slot>,
}

#[derive(Debug)]
struct Slot {
    phase: Phase,
    evict: CancellationToken,
}

impl Client {
    /// Its oldest connection of `phase` and how many of them it holds, if any.
    fn oldest(&self, phase: Phase) -> Option<(u64, usize)> {
        let held = &self.by_phase[phase as usize];
        held.first().map(|id| (*id, held.len()))
    }
}

impl Admission {
    /// Places within `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// The bounds in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// A place for a new connection from `ip`, [`Phase::Silent`]; the connection closed
    /// to make room, if any. Never refused: at the bound the oldest connection of the
    /// client holding the most gives its place.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> (Arc<Ticket>, Option<Evicted>) {
        let key = ClientKey::from(ip);
        let mut state = self.lock();
        let total: usize = state.held.iter().sum();
        let evicted = (total >= self.limits.connections.max(1))
            .then(|| state.evict(&EVICTION_ORDER))
            .flatten()
            .map(|()| Evicted::Connection);
        let id = state.next;
        state.next += 1;
        let evict = CancellationToken::new();
        let client = state.clients.entry(key).or_default();
        client.by_phase[Phase::Silent as usize].insert(id);
        client.slots.insert(
            id,
            Slot {
                phase: Phase::Silent,
                evict: evict.clone(),
            },
        );
        state.held[Phase::Silent as usize] += 1;
        let ticket = Arc::new(Ticket {
            admission: self.clone(),
            key,
            id,
            evict,
        });
        (ticket, evicted)
    }

    /// Connections held now, by phase: silent, pending, served.
    pub fn held(&self) -> [usize; 3] {
        self.lock().held
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// Closes the connection that gives its place: of the first of `phases` anyone
    /// holds, the oldest of the client holding the most above [`FAIR_SHARE`], else the
    /// oldest. `None` when nobody holds one.
    fn evict(&mut self, phases: &[Phase]) -> Option<()> {
        let phase = *phases.iter().find(|p| self.held[**p as usize] > 0)?;
        let (_, _, key) = self
            .clients
            .iter()
            .filter_map(|(key, client)| {
                let (id, held) = client.oldest(phase)?;
                let over = if held > FAIR_SHARE { held } else { 0 };
                Some((over, Reverse(id), *key))
            })
            .max()?;
        let id = self.clients[&key].by_phase[phase as usize]
            .first()
            .copied()?;
        self.release(key, id);
        Some(())
    }

    /// Moves connection `id` of `key` to `phase`; `false` when it is gone.
    fn set_phase(&mut self, key: ClientKey, id: u64, phase: Phase) -> bool {
        let Some(client) = self.clients.get_mut(&key) else {
            return false;
        };
        let Some(slot) = client.slots.get_mut(&id) else {
            return false;
        };
        let was = std::mem::replace(&mut slot.phase, phase);
        if was != phase {
            client.by_phase[was as usize].remove(&id);
            client.by_phase[phase as usize].insert(id);
            self.held[was as usize] -= 1;
            self.held[phase as usize] += 1;
        }
        true
    }

    /// Frees connection `id` of `key` (evicting its holder); nothing if already free.
    fn release(&mut self, key: ClientKey, id: u64) {
        let Some(client) = self.clients.get_mut(&key) else {
            return;
        };
        let Some(slot) = client.slots.remove(&id) else {
            return;
        };
        client.by_phase[slot.phase as usize].remove(&id);
        slot.evict.cancel();
        self.held[slot.phase as usize] -= 1;
        if client.slots.is_empty() {
            self.clients.remove(&key);
        }
    }
}

/// A connection's place, freed when dropped.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    key: ClientKey,
    id: u64,
    evict: CancellationToken,
}

impl Ticket {
    /// The connection reads TLS or request headers ([`Phase::Pending`], unless it is
    /// already): a connection not yet served gives its place when the budget is full;
    /// which bound evicted one, if any.
    pub fn pending(&self) -> Option<Evicted> {
        let admission = &self.admission;
        let mut state = admission.lock();
        let already = state
            .clients
            .get(&self.key)
            .and_then(|c| c.slots.get(&self.id))
            .is_none_or(|slot| slot.phase == Phase::Pending);
        if already {
            return None;
        }
        let evicted = (state.held[Phase::Pending as usize] >= admission.limits.pending())
            .then(|| state.evict(&[Phase::Pending]))
            .flatten()
            .map(|()| Evicted::Pending);
        state.set_phase(self.key, self.id, Phase::Pending);
        evicted
    }

    /// The request's headers were read: the connection is [`Phase::Served`].
    pub fn served(&self) {
        self.admission
            .lock()
            .set_phase(self.key, self.id, Phase::Served);
    }

    /// Whether the connection is in [`Phase::Served`] (`false` once evicted).
    pub fn is_served(&self) -> bool {
        let state = self.admission.lock();
        state
            .clients
            .get(&self.key)
            .and_then(|c| c.slots.get(&self.id))
            .is_some_and(|slot| slot.phase == Phase::Served)
    }

    /// Completes when the place was given to another connection.
    pub fn evicted(&self) -> WaitForCancellationFutureOwned {
        self.evict.clone().cancelled_owned()
    }

    /// Whether the place was given to another connection.
    pub fn is_evicted(&self) -> bool {
        self.evict.is_cancelled()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.admission.lock();
        state.release(self.key, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 6 connections, 3 of them pending.
    const SMALL: Limits = Limits {
        connections: 6,
        pending_bytes: 300,
        pending_cost: 100,
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn one_client_may_hold_every_place_until_another_comes() {
        let admission = Admission::new(SMALL);
        let flood: Vec<_> = (0..6).map(|_| admission.admit(ip(1)).0).collect();
        assert_eq!(admission.held(), [6, 0, 0]);
        // The probe, from the same address, takes the oldest.
        let (probe, evicted) = admission.admit(ip(1));
        assert_eq!(evicted, Some(Evicted::Connection));
        assert!(flood[0].is_evicted() && flood[1..].iter().all(|t| !t.is_evicted()));
        // From another address too.
        let (_other, evicted) = admission.admit(ip(2));
        assert_eq!(evicted, Some(Evicted::Connection));
        assert!(flood[1].is_evicted() && !probe.is_evicted());
        assert_eq!(admission.held(), [6, 0, 0]);
    }

    #[test]
    fn at_the_bound_every_client_holding_one_the_oldest_gives_way() {
        let admission = Admission::new(SMALL);
        let many: Vec<_> = (0..6).map(|n| admission.admit(ip(n)).0).collect();
        let (probe, evicted) = admission.admit(ip(9));
        assert_eq!(evicted, Some(Evicted::Connection));
        assert!(many[0].is_evicted() && many[1..].iter().all(|t| !t.is_evicted()));
        // Five newcomers later the probe is still there: it is the last to go.
        let later: Vec<_> = (10..15).map(|n| admission.admit(ip(n)).0).collect();
        assert!(!probe.is_evicted());
        assert!(many.iter().all(|t| t.is_evicted()) && later.iter().all(|t| !t.is_evicted()));
    }

    #[test]
    fn silent_connections_go_first_then_served_ones_and_pending_ones_last() {
        let admission = Admission::new(Limits {
            connections: 3,
            ..SMALL
        });
        let served = admission.admit(ip(1)).0;
        served.pending();
        served.served();
        let pending = admission.admit(ip(2)).0;
        pending.pending();
        let silent = admission.admit(ip(3)).0;
        let first = admission.admit(ip(4)).0;
        assert!(silent.is_evicted() && !served.is_evicted() && !pending.is_evicted());
        first.pending();
        // No silent connection left: the served one goes, not those reading.
        let second = admission.admit(ip(5)).0;
        assert!(served.is_evicted() && !pending.is_evicted() && !first.is_evicted());
        second.pending();
        // Only connections reading are left: the oldest goes.
        let _third = admission.admit(ip(6)).0;
        assert!(pending.is_evicted() && !first.is_evicted() && !second.is_evicted());
    }

    #[test]
    fn a_probe_outlives_kept_alive_connections_from_as_many_addresses_as_places() {
        let admission = Admission::new(Limits {
            connections: 7,
            ..SMALL
        });
        let kept: Vec<_> = (1..=6)
            .map(|n| {
                let ticket = admission.admit(ip(n)).0;
                ticket.pending();
                ticket.served();
                ticket
            })
            .collect();
        let probe = admission.admit(ip(9)).0;
        probe.pending();
        let _newcomer = admission.admit(ip(2)).0;
        assert!(!probe.is_evicted());
        assert!(kept[0].is_evicted());
    }

    #[test]
    fn a_client_over_its_fair_share_gives_way_before_older_connections_of_others() {
        let admission = Admission::new(Limits {
            connections: 64,
            pending_bytes: (FAIR_SHARE + 3) * 100,
            pending_cost: 100,
        });
        let other = admission.admit(ip(2)).0;
        other.pending();
        let flood: Vec<_> = (0..FAIR_SHARE + 2)
            .map(|_| {
                let ticket = admission.admit(ip(1)).0;
                ticket.pending();
                ticket
            })
            .collect();
        let probe = admission.admit(ip(9)).0;
        assert_eq!(probe.pending(), Some(Evicted::Pending));
        assert!(flood[0].is_evicted() && !other.is_evicted());
        // The node's address holding two probes is no heavier than anyone.
        let second_probe = admission.admit(ip(9)).0;
        assert_eq!(second_probe.pending(), Some(Evicted::Pending));
        assert!(flood[1].is_evicted() && !probe.is_evicted());
    }

    #[test]
    fn the_pending_budget_closes_the_oldest_pending_connection() {
        let admission = Admission::new(SMALL);
        let a: Vec<_> = (0..2).map(|_| admission.admit(ip(1)).0).collect();
        let b = admission.admit(ip(2)).0;
        for t in a.iter().chain([&b]) {
            assert_eq!(t.pending(), None);
        }
        let probe = admission.admit(ip(9)).0;
        assert_eq!(probe.pending(), Some(Evicted::Pending));
        assert!(a[0].is_evicted() && !a[1].is_evicted() && !b.is_evicted());
        assert_eq!(admission.held(), [0, 3, 0]);
        // Served, the probe no longer counts; pending again (its next request), it does.
        probe.served();
        assert!(probe.is_served());
        let c = admission.admit(ip(3)).0;
        assert_eq!(c.pending(), None);
        assert_eq!(admission.held(), [0, 3, 1]);
        assert_eq!(probe.pending(), Some(Evicted::Pending));
        // Everyone held one: the oldest pending went.
        assert!(a[1].is_evicted() && !c.is_evicted() && !probe.is_evicted());
        // An evicted ticket dropped later frees nothing twice.
        drop(a);
        assert_eq!(admission.held(), [0, 3, 0]);
    }

    #[test]
    fn ipv6_clients_are_their_slash_64_and_mapped_ipv4_is_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ClientKey::from(a), ClientKey::from(b));
        assert_ne!(ClientKey::from(a), ClientKey::from(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(ClientKey::from(mapped), ClientKey::from(ip(1)));
    }
}
