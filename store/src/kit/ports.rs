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
//!
//! Unlikely is not never, and other programs hold ports too: a connect to a port says that
//! something listens there, not what. [`listening_addrs`] says which addresses a given process
//! listens on, for servers that cannot print the addresses they bound.

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

/// The TCP addresses process `pid` listens on: the socket inodes among its open files,
/// matched against the listening sockets of its network namespace (`/proc/PID/net/tcp` and
/// `tcp6`). Empty once the process has exited. This says which process holds a port, which a
/// connect cannot.
pub fn listening_addrs(pid: u32) -> Vec<std::net::SocketAddr> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: std::collections::HashSet<String> = entries
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            Some(target.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut listening = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            const LISTEN: &str = "0A";
            if fields.len() > 9 && fields[3] == LISTEN && inodes.contains(fields[9]) {
                if let Some(address) = proc_net_address(fields[1]) {
                    listening.push(address);
                }
            }
        }
    }
    listening
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): the kernel prints each 32-bit
/// word of the address in the machine's byte order, the port in hex.
fn proc_net_address(text: &str) -> Option<std::net::SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |at: usize| -> Option<[u8; 4]> {
        Some(u32::from_str_radix(address.get(at..at + 8)?, 16).ok()?.to_ne_bytes())
    };
    let ip: std::net::IpAddr = match address.len() {
        8 => std::net::Ipv4Addr::from(word(0)?).into(),
        32 => {
            let mut bytes = [0u8; 16];
            for n in 0..4 {
                bytes[n * 4..n * 4 + 4].copy_from_slice(&word(n * 8)?);
            }
            // An IPv4 address bound through an IPv6 socket (Java's way) is shown as IPv4.
            std::net::Ipv6Addr::from(bytes).to_canonical()
        }
        _ => return None,
    };
    Some(std::net::SocketAddr::new(ip, port))
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

    #[test]
    fn listening_addrs_names_this_process_listeners_only() {
        let v4 = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let v6 = TcpListener::bind("[::1]:0").ok();
        let connected = std::net::TcpStream::connect(v4.local_addr().expect("address"));
        let listening = listening_addrs(std::process::id());
        assert!(listening.contains(&v4.local_addr().expect("address")), "{listening:?}");
        if let Some(v6) = &v6 {
            assert!(listening.contains(&v6.local_addr().expect("address")), "{listening:?}");
        }
        drop((connected, v4, v6));
        assert!(listening_addrs(u32::MAX).is_empty());
    }
}
