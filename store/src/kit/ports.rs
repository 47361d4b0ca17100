//! Loopback ports for servers that tests and benches start as processes of their own (the
//! `ferromq` binary, a throwaway PostgreSQL, ActiveMQ): chosen here, bound there a moment
//! later, and often bound again after a restart on the same port.
//!
//! `bind("127.0.0.1:0")` hands out a port from the kernel's ephemeral range, the same range
//! every outgoing connection's local port comes from: between the check and the server's
//! bind (or while a killed broker is down), a client socket of the same machine could take it,
//! and the server then fails with "Address already in use" (seen in CI). Ports below the
//! ephemeral range are only ever taken by listeners that ask for them, so a port found free
//! there stays free unless another test picks the same one: the start is random per process
//! and calls step through the range, which makes that unlikely.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out: above the well-known and common service ports.
const FIRST: u16 = 10_000;

/// Linux's default ephemeral range starts here (`net.ipv4.ip_local_port_range`).
const DEFAULT_EPHEMERAL_START: u16 = 32_768;

/// Successive calls in one process: a stride prime to the range's length walks all of it.
static NEXT: AtomicU32 = AtomicU32::new(0);
const STRIDE: u32 = 7_919;

/// A loopback TCP port free right now and outside the kernel's ephemeral range (see the
/// module's documentation), or an ephemeral one when the range leaves no room below it.
pub fn loopback_port() -> std::io::Result<u16> {
    let end = ephemeral_start();
    if end > FIRST + 1_000 {
        let span = u32::from(end - FIRST);
        let start = process_seed();
        for _ in 0..span {
            let step = NEXT.fetch_add(1, Ordering::Relaxed);
            let offset = start.wrapping_add(step.wrapping_mul(STRIDE)) % span;
            let port = FIRST + offset as u16;
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

/// Where the ephemeral range starts on this machine.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(DEFAULT_EPHEMERAL_START)
}

/// A number that differs between processes (std's random hash keys) and is fixed within one.
fn process_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    static SEED: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish() as u32
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| loopback_port().expect("a port")).collect();
        let end = ephemeral_start();
        for port in &ports {
            assert!(*port < end || end <= FIRST + 1_000, "{port} is ephemeral (from {end})");
            TcpListener::bind((Ipv4Addr::LOCALHOST, *port)).expect("still free");
        }
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }
}
