//! Which admin connections are served: at most [`MAX_CONNECTIONS`] at once, and at most
//! [`MAX_CONNECTIONS_PER_ADDRESS`] of them from one address, so that one client holding
//! connections open (half-sent requests, say) cannot take the whole pool and lock the health
//! check out for everyone else.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;

/// The most admin connections served at once; more are closed at once (a scraper and a few
/// people need far fewer, and the endpoint must never cost the broker much).
pub(super) const MAX_CONNECTIONS: usize = 64;

/// The most admin connections served at once for one source address: a quarter of the pool,
/// so that at least four addresses fit, and far more than a dashboard, a scraper and a
/// supervisor on one host keep open.
pub(super) const MAX_CONNECTIONS_PER_ADDRESS: usize = 16;

/// Counts the connections being served, in all and per address.
#[derive(Default)]
pub(super) struct Admission {
    inner: Arc<Mutex<Counts>>,
}

#[derive(Default)]
struct Counts {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// [`MAX_CONNECTIONS`] are served already.
    Full,
    /// [`MAX_CONNECTIONS_PER_ADDRESS`] from this address are served already.
    AddressFull,
}

/// One admitted connection; dropping it frees its place.
pub(super) struct Admitted {
    inner: Arc<Mutex<Counts>>,
    address: IpAddr,
}

impl Admission {
    /// A place for a connection from `address`, if there is one.
    pub fn admit(&self, address: IpAddr) -> Result<Admitted, Refused> {
        let mut counts = self.inner.lock();
        if counts.total >= MAX_CONNECTIONS {
            return Err(Refused::Full);
        }
        let of_address = counts.by_address.entry(address).or_insert(0);
        if *of_address >= MAX_CONNECTIONS_PER_ADDRESS {
            return Err(Refused::AddressFull);
        }
        *of_address += 1;
        counts.total += 1;
        Ok(Admitted { inner: self.inner.clone(), address })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self.inner.lock();
        counts.total -= 1;
        // The entry goes with its last connection, so the map holds only addresses served now.
        if let Some(of_address) = counts.by_address.get_mut(&self.address) {
            *of_address -= 1;
            if *of_address == 0 {
                counts.by_address.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_gets_a_quarter_of_the_pool_and_others_the_rest() {
        let admission = Admission::default();
        let first: IpAddr = [127, 0, 0, 1].into();
        let mut held: Vec<Admitted> = (0..MAX_CONNECTIONS_PER_ADDRESS)
            .map(|_| admission.admit(first).expect("a place"))
            .collect();
        assert_eq!(admission.admit(first).err(), Some(Refused::AddressFull));
        for other in 2..=((MAX_CONNECTIONS / MAX_CONNECTIONS_PER_ADDRESS) as u8) {
            for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
                held.push(admission.admit([127, 0, 0, other].into()).expect("a place"));
            }
        }
        assert_eq!(admission.admit([127, 0, 0, 99].into()).err(), Some(Refused::Full));
        held.remove(0);
        assert!(admission.admit(first).is_ok(), "a freed place can be taken again");
        drop(held);
        assert!(admission.inner.lock().by_address.is_empty());
    }
}
