//! Who may hold the secure port's connections and handshakes.
//!
//! The port is reachable by anyone who reaches the node (`hostNetwork`, `0.0.0.0`), and
//! the kubelet's liveness probe needs a handshake and a connection like everyone else.
//! So slots are shared out by client, not first come first served:
//! - a client (an IPv4 address, or an IPv6 /64) holds at most
//!   [`Limits::handshakes_per_client`] handshakes and [`Limits::connections_per_client`]
//!   connections; more from it are refused;
//! - when every slot is taken, a newcomer takes the oldest slot of the client holding
//!   the most, as long as that client holds more than the newcomer would: a flood of
//!   idle or slow connections from a few addresses cannot keep a probe, or a scraper's
//!   kept-alive connection, out. Only when every client holds as few as the newcomer is
//!   it refused.
//!
//! A slot is a [`Ticket`]: dropped, it is free; evicted, its [`Ticket::evicted`] future
//! completes and the connection holding it closes.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// How many handshakes and connections the port holds, in all and per client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once, handshakes included.
    pub connections: usize,
    /// Connections one client holds at once.
    pub connections_per_client: usize,
    /// Handshakes in progress at once.
    pub handshakes: usize,
    /// Handshakes one client has in progress at once.
    pub handshakes_per_client: usize,
}

impl Limits {
    /// The secure port's.
    pub const SECURE_PORT: Limits = Limits {
        connections: 256,
        connections_per_client: 32,
        handshakes: 64,
        handshakes_per_client: 8,
    };
}

/// Who a connection counts against: an IPv4 address, or the /64 of an IPv6 one (a
/// host is given a whole /64; an IPv4-mapped address is its IPv4 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The client holds its share of handshakes already.
    ClientHandshakes,
    /// The client holds its share of connections already.
    ClientConnections,
    /// Every slot is taken by clients holding no more than this one would.
    Full,
}

impl Refused {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::ClientHandshakes => "client-handshakes",
            Refused::ClientConnections => "client-connections",
            Refused::Full => "full",
        }
    }
}

/// What was taken from another client to admit a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evicted {
    /// Nothing: there was room.
    None,
    /// A handshake in progress.
    Handshake,
    /// An open connection.
    Connection,
}

/// The slots of the secure port.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    connections: usize,
    handshakes: usize,
    clients: HashMap<ClientKey, Client>,
}

/// One client's slots by admission order (oldest first).
#[derive(Debug, Default)]
struct Client {
    slots: BTreeMap<u64, Slot>,
    handshakes: usize,
}

#[derive(Debug)]
struct Slot {
    handshaking: bool,
    evict: CancellationToken,
}

impl Admission {
    /// Slots within `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// A slot for a new connection from `ip`, in its handshake; what was evicted to make
    /// room, if anything.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<(Ticket, Evicted), Refused> {
        let key = ClientKey::from(ip);
        let limits = self.limits;
        let mut state = self.lock();
        let (held, handshaking) = state
            .clients
            .get(&key)
            .map_or((0, 0), |c| (c.slots.len(), c.handshakes));
        if handshaking >= limits.handshakes_per_client {
            return Err(Refused::ClientHandshakes);
        }
        if held >= limits.connections_per_client {
            return Err(Refused::ClientConnections);
        }
        let mut evicted = Evicted::None;
        if state.handshakes >= limits.handshakes {
            // The newcomer will hold `handshaking + 1`.
            state.evict(key, handshaking + 1, true)?;
            evicted = Evicted::Handshake;
        }
        if state.connections >= limits.connections {
            state.evict(key, held + 1, false)?;
            if evicted == Evicted::None {
                evicted = Evicted::Connection;
            }
        }
        let id = state.next;
        state.next += 1;
        let evict = CancellationToken::new();
        let client = state.clients.entry(key).or_default();
        client.slots.insert(
            id,
            Slot {
                handshaking: true,
                evict: evict.clone(),
            },
        );
        client.handshakes += 1;
        state.handshakes += 1;
        state.connections += 1;
        Ok((
            Ticket {
                admission: self.clone(),
                key,
                id,
                evict,
            },
            evicted,
        ))
    }

    /// Connections and handshakes held now.
    pub fn held(&self) -> (usize, usize) {
        let state = self.lock();
        (state.connections, state.handshakes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// Frees a slot (a handshake's, if `handshake`) of the client holding the most of
    /// them, if it holds more than `newcomer` would (and is not the newcomer).
    fn evict(
        &mut self,
        newcomer: ClientKey,
        would_hold: usize,
        handshake: bool,
    ) -> Result<(), Refused> {
        let count = |c: &Client| {
            if handshake {
                c.handshakes
            } else {
                c.slots.len()
            }
        };
        let victim = self
            .clients
            .iter()
            .filter(|(key, client)| **key != newcomer && count(client) > would_hold)
            .max_by_key(|(_, client)| count(client))
            .map(|(key, _)| *key)
            .ok_or(Refused::Full)?;
        let client = self
            .clients
            .get_mut(&victim)
            .expect("the victim is a client");
        // Its oldest handshake; for a connection, a handshake first (it is serving nobody).
        let id = client
            .slots
            .iter()
            .find(|(_, slot)| slot.handshaking)
            .or_else(|| client.slots.iter().next())
            .map(|(id, _)| *id)
            .expect("a client holding slots");
        self.release(victim, id);
        Ok(())
    }

    /// Frees slot `id` of `key` (evicting its holder); nothing if already free.
    fn release(&mut self, key: ClientKey, id: u64) {
        let Some(client) = self.clients.get_mut(&key) else {
            return;
        };
        let Some(slot) = client.slots.remove(&id) else {
            return;
        };
        slot.evict.cancel();
        self.connections -= 1;
        if slot.handshaking {
            client.handshakes -= 1;
            self.handshakes -= 1;
        }
        if client.slots.is_empty() {
            self.clients.remove(&key);
        }
    }
}

/// A connection's slot, freed when dropped.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    key: ClientKey,
    id: u64,
    evict: CancellationToken,
}

impl Ticket {
    /// The handshake finished: the slot counts as a connection only.
    pub fn handshaken(&self) {
        let mut state = self.admission.lock();
        let Some(client) = state.clients.get_mut(&self.key) else {
            return;
        };
        let Some(slot) = client.slots.get_mut(&self.id) else {
            return;
        };
        if std::mem::replace(&mut slot.handshaking, false) {
            client.handshakes -= 1;
            state.handshakes -= 1;
        }
    }

    /// Completes when the slot was given to another client.
    pub fn evicted(&self) -> WaitForCancellationFutureOwned {
        self.evict.clone().cancelled_owned()
    }

    /// Whether the slot was given to another client.
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

    const SMALL: Limits = Limits {
        connections: 6,
        connections_per_client: 4,
        handshakes: 3,
        handshakes_per_client: 2,
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_client_holds_its_share_and_no_more() {
        let admission = Admission::new(SMALL);
        let first = admission.admit(ip(1)).unwrap().0;
        let second = admission.admit(ip(1)).unwrap().0;
        assert_eq!(
            admission.admit(ip(1)).unwrap_err(),
            Refused::ClientHandshakes
        );
        first.handshaken();
        second.handshaken();
        let third = admission.admit(ip(1)).unwrap().0;
        third.handshaken();
        let _fourth = admission.admit(ip(1)).unwrap().0;
        assert_eq!(
            admission.admit(ip(1)).unwrap_err(),
            Refused::ClientConnections
        );
        drop(first);
        assert!(admission.admit(ip(1)).is_ok());
    }

    #[test]
    fn a_newcomer_takes_the_oldest_handshake_of_the_client_holding_most() {
        let admission = Admission::new(SMALL);
        let a1 = admission.admit(ip(1)).unwrap().0;
        let a2 = admission.admit(ip(1)).unwrap().0;
        let b1 = admission.admit(ip(2)).unwrap().0;
        // Every handshake slot is taken: the probe takes a1's.
        let (probe, evicted) = admission.admit(ip(9)).unwrap();
        assert_eq!(evicted, Evicted::Handshake);
        assert!(a1.is_evicted() && !a2.is_evicted() && !b1.is_evicted());
        assert_eq!(admission.held(), (3, 3));
        // Now everyone holds one: a fourth client is refused, nobody evicted.
        assert_eq!(admission.admit(ip(3)).unwrap_err(), Refused::Full);
        assert!(!a2.is_evicted() && !b1.is_evicted() && !probe.is_evicted());
        // An evicted ticket dropped later frees nothing twice.
        drop(a1);
        assert_eq!(admission.held(), (3, 3));
    }

    #[test]
    fn connections_of_the_heaviest_client_make_room_and_handshakes_go_first() {
        let admission = Admission::new(SMALL);
        let mut flood = Vec::new();
        for _ in 0..4 {
            let (ticket, _) = admission.admit(ip(1)).unwrap();
            ticket.handshaken();
            flood.push(ticket);
        }
        let scraper = admission.admit(ip(2)).unwrap().0;
        scraper.handshaken();
        let pending = admission.admit(ip(3)).unwrap().0;
        // Full: the newcomer evicts ip(1)'s oldest connection, never the scraper's.
        let (probe, evicted) = admission.admit(ip(4)).unwrap();
        assert_eq!(evicted, Evicted::Connection);
        assert!(flood[0].is_evicted());
        assert!(flood[1..].iter().all(|t| !t.is_evicted()));
        assert!(!scraper.is_evicted() && !pending.is_evicted());
        drop(probe);
        assert_eq!(admission.held(), (5, 1));
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
