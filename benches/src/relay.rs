//! S6's socket floor: the CPU that S6's socket traffic costs a process that does nothing else.
//!
//! S6 is 25 producers that each send a persistent message and wait for its response, and 25
//! consumers that each receive a message and acknowledge it. Whatever a broker does, every
//! message costs it a read of the send, a write of the response, a write of the delivery and
//! a read of the ack on loopback TCP, and on loopback a write also runs the receiver's side of
//! the TCP stack. [`relay_floor`] measures that part alone: the same clients (blocking
//! sockets, one thread each) against a relay that answers each message with a reply and
//! passes it on to a consumer, on a single-threaded tokio runtime (the runtime ferromq runs
//! on), with no decoding, routing, store or encoding behind it. A broker's CPU per message in
//! S6 above this figure is its own work; below it is not reachable on the machine.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::efficiency::thread_cpu_time;

/// About an OpenWire message of 1 KiB as `ferromq perf` sends it, and a response or an ack.
const MESSAGE: usize = 1100;
const REPLY: usize = 40;

/// What [`relay_floor`] measured.
#[derive(Debug, Clone, Copy)]
pub struct RelayFloor {
    /// Messages relayed per second.
    pub rate: f64,
    /// The relay thread's CPU time (user + system) per message relayed, in microseconds.
    pub cpu_us_per_message: f64,
}

/// Relays messages between `pairs` producers and `pairs` consumers for `duration` and
/// reports the relay's CPU per message.
pub fn relay_floor(pairs: usize, duration: Duration) -> anyhow::Result<RelayFloor> {
    let producers = TcpListener::bind("127.0.0.1:0").context("binding the relay's listener")?;
    let consumers = TcpListener::bind("127.0.0.1:0").context("binding the relay's listener")?;
    let (producer_addr, consumer_addr) = (producers.local_addr()?, consumers.local_addr()?);
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::with_capacity(2 * pairs);
    for _ in 0..pairs {
        let stop = Arc::clone(&stop);
        clients.push(std::thread::spawn(move || producer(producer_addr, &stop)));
        clients.push(std::thread::spawn(move || consumer(consumer_addr)));
    }
    let relay = std::thread::spawn(move || relay(producers, consumers, pairs, duration));
    let measured = relay.join().map_err(|_| anyhow!("the relay thread panicked"));
    // The relay's sockets are closed: every client sees the end of its stream and returns.
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.join();
    }
    measured?
}

/// Sends a message and waits for its reply, until stopped or the relay goes away.
fn producer(addr: SocketAddr, stop: &AtomicBool) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let message = [7u8; MESSAGE];
    let mut reply = [0u8; REPLY];
    while !stop.load(Ordering::Relaxed) {
        stream.write_all(&message)?;
        stream.read_exact(&mut reply)?;
    }
    Ok(())
}

/// Receives messages and acknowledges each, until the relay goes away.
fn consumer(addr: SocketAddr) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut message = [0u8; MESSAGE];
    let ack = [1u8; REPLY];
    loop {
        stream.read_exact(&mut message)?;
        stream.write_all(&ack)?;
    }
}

fn relay(
    producers: TcpListener,
    consumers: TcpListener,
    pairs: usize,
    duration: Duration,
) -> anyhow::Result<RelayFloor> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        producers.set_nonblocking(true)?;
        consumers.set_nonblocking(true)?;
        let producers = tokio::net::TcpListener::from_std(producers)?;
        let consumers = tokio::net::TcpListener::from_std(consumers)?;
        let relayed = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::<std::io::Result<()>>::new();
        for _ in 0..pairs {
            let accept = Duration::from_secs(10);
            let (from, _) = tokio::time::timeout(accept, producers.accept())
                .await
                .context("a producer did not connect")??;
            let (to, _) = tokio::time::timeout(accept, consumers.accept())
                .await
                .context("a consumer did not connect")??;
            from.set_nodelay(true)?;
            to.set_nodelay(true)?;
            let (mut acks, deliveries) = to.into_split();
            tasks.spawn(pass_on(from, deliveries, Arc::clone(&relayed)));
            tasks.spawn(async move {
                let mut buf = [0u8; 4096];
                while acks.read(&mut buf).await? > 0 {}
                Ok(())
            });
        }
        let (cpu_before, count_before, started) =
            (thread_cpu_time()?, relayed.load(Ordering::Relaxed), Instant::now());
        tokio::time::sleep(duration).await;
        let (cpu_after, count_after, elapsed) =
            (thread_cpu_time()?, relayed.load(Ordering::Relaxed), started.elapsed());
        tasks.abort_all();
        let messages = count_after.saturating_sub(count_before).max(1) as f64;
        Ok(RelayFloor {
            rate: messages / elapsed.as_secs_f64(),
            cpu_us_per_message: cpu_after.saturating_sub(cpu_before).as_secs_f64() * 1e6 / messages,
        })
    })
}

/// Answers each message from a producer and passes it on to its consumer.
async fn pass_on(
    mut from: tokio::net::TcpStream,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    relayed: Arc<AtomicU64>,
) -> std::io::Result<()> {
    let mut message = [0u8; MESSAGE];
    let reply = [2u8; REPLY];
    loop {
        from.read_exact(&mut message).await?;
        from.write_all(&reply).await?;
        to.write_all(&message).await?;
        relayed.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_passes_messages_on_and_counts_its_own_cpu() {
        let floor = relay_floor(2, Duration::from_millis(300)).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(floor.rate > 0.0, "{floor:?}");
        assert!(floor.cpu_us_per_message.is_finite(), "{floor:?}");
    }
}
