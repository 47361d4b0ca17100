//! The connection driver: the one loop every protocol's connection runs in. It reads the
//! socket into an adaptive buffer, keeps the read deadline (the handshake's connect timeout,
//! then the protocol's inactivity limit), stops reading while a login is checked or while the
//! protocol pauses its reader, takes deliveries only while the writer has room, and hands each
//! thing that happened to the protocol: input, a login's outcome, a delivery, a notice from
//! the core, a held send let go, the protocol's own asynchronous work, the deadline, the
//! broker's shutdown or an administrator's close of this one connection (answered alike).
//! The protocol answers each with a [`Step`].
//!
//! A protocol is its codec, its mapping and an implementation of [`Protocol`]: it owns its
//! state, the driver owns the loop, so the loop's rules (what waits for what, what ends a
//! connection, when silence is too long) are the same for every protocol.

use std::future::Future;
use std::sync::Arc;

use bytes::BytesMut;
use futures_util::{Stream, StreamExt};
use store::Message;
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::writer::Output;
use super::{ConnectionContext, ConnectionEntry, ReadBuffer};
use crate::core::{ConnectionId, ConsumerNotice, CoreError, Delivery, HeldSends, NoticeReceiver};
use crate::security::{AuthError, PendingLogin, Subject};
use crate::session::Session;

/// What the connection does after the protocol handled something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Go on.
    Continue,
    /// Close once every answer still waiting for the store is written
    /// ([`Protocol::on_finish`]): a client's own close, a refused login.
    Finish,
    /// Close now (what the protocol had to say is written already).
    Stop,
}

/// What the driver waits on for a protocol, borrowed from the connection together for one
/// turn of the loop (the handlers then get the whole connection again).
pub(crate) struct Parts<'a, Login, Key, Held, Work> {
    pub connection: ConnectionId,
    pub output: &'a Output,
    pub deliveries: &'a mut mpsc::UnboundedReceiver<Delivery>,
    pub notices: &'a mut NoticeReceiver,
    pub held: &'a mut HeldSends<Key, Held>,
    pub login: &'a mut PendingLogin<Login>,
    /// The connection's entry in the admin endpoint's list, which an administrator may close
    /// it through (none for a connection that is not listed).
    pub listed: Option<&'a ConnectionEntry>,
    /// The protocol's own asynchronous work (answers waiting for the store, timers, queue
    /// snapshots): resolves with the next piece done, pending for ever while there is none.
    pub work: Work,
}

impl<'a, Login, Key, Held, Work> Parts<'a, Login, Key, Held, Work> {
    pub fn of<T: Eq + std::hash::Hash>(
        session: &'a mut Session<T>,
        output: &'a Output,
        held: &'a mut HeldSends<Key, Held>,
        login: &'a mut PendingLogin<Login>,
        work: Work,
    ) -> Self {
        let connection = session.connection();
        let (deliveries, notices, listed) = session.channels();
        Parts { connection, output, deliveries, notices, held, login, listed, work }
    }
}

/// A held send let go, with the outcome of its wait for room.
pub(crate) type Admitted<Held> = ((Held, Arc<Message>), Result<(), CoreError>);

/// One protocol's side of a connection.
pub(crate) trait Protocol {
    /// The request a login answers (a CONNECT frame, a ConnectionInfo, nothing).
    type Login: Send;
    /// What held sends queue by (a producer, a link, the whole connection).
    type HeldKey: Clone + Eq + std::hash::Hash + Send + 'static;
    type Held;
    /// A piece of the protocol's own asynchronous work, done.
    type Work;

    fn parts(
        &mut self,
    ) -> Parts<'_, Self::Login, Self::HeldKey, Self::Held, impl Future<Output = Self::Work> + Send>;

    /// Whether the protocol stops reading for now, beyond a login being checked (STOMP's
    /// and OpenWire's pause while they hold all the sends they may). A protocol that stops
    /// decoding the buffer as well is handed what remains in it once a held send was
    /// admitted and the pause is over.
    fn reading_paused(&self) -> bool {
        false
    }

    /// Decodes and handles every complete frame in `buffer`.
    fn on_input(&mut self, buffer: &mut BytesMut) -> Step;

    /// A login was checked; `buffer` holds what the client sent behind it.
    fn on_login(
        &mut self,
        request: Self::Login,
        outcome: Result<Subject, AuthError>,
        buffer: &mut BytesMut,
    ) -> Step;

    fn on_delivery(&mut self, delivery: Delivery);

    /// The core closed one of the connection's consumers (a slow consumer abort).
    fn on_notice(&mut self, notice: ConsumerNotice) -> Step;

    fn on_admitted(&mut self, admitted: Admitted<Self::Held>);

    fn on_work(&mut self, work: Self::Work) -> Step;

    /// When the client must next have sent something by, once what it sent was handled:
    /// `None` leaves the deadline as it is (the handshake's connect timeout runs on).
    fn read_deadline(&self, now: Instant) -> Option<Instant>;

    /// The client was silent past the deadline: say so if the protocol can. The connection
    /// then closes.
    fn on_silence(&mut self);

    /// An administrator closes this connection (the admin endpoint's `DELETE
    /// /api/connections/{id}`): by default as a shutdown; a protocol that can say why, or
    /// whose client's failure it is not (MQTT's will), says so.
    fn on_admin_close(&mut self) -> Step {
        self.on_shutdown()
    }

    /// The broker is shutting down: by default the client gets what is pending, then the
    /// connection closes.
    fn on_shutdown(&mut self) -> Step {
        Step::Finish
    }

    /// Writes every answer still waiting for the store (held sends, never accepted, get
    /// none).
    fn on_finish(&mut self) -> impl Future<Output = ()> + Send;
}

/// The next item of `stream` (a protocol's pending answers, timers): pending for ever while
/// it has none, so that a turn of the loop can always wait on it.
pub(crate) async fn next<S: Stream + Unpin>(stream: &mut S) -> S::Item {
    match stream.next().await {
        Some(item) => item,
        None => std::future::pending().await,
    }
}

/// What happened, taken out of the turn's borrows.
enum Event<P: Protocol> {
    Shutdown,
    /// An administrator closes the connection.
    Closed,
    Read(std::io::Result<usize>),
    Login(P::Login, Result<Subject, AuthError>),
    Delivery(Delivery),
    Room,
    Notice(ConsumerNotice),
    Admitted(Admitted<P::Held>),
    Work(P::Work),
    Deadline,
}

/// Deliveries handled in one turn of the loop at most, so that reads, acks and notices still
/// get their turns while a queue streams to a fast consumer.
const DELIVERIES_PER_TURN: usize = 64;

/// Runs `protocol`'s connection on `reader` until it closes. What ends it (the protocol's
/// release, the writer's last frames) is the caller's. A client that has not logged in by
/// `connect_deadline` (the connect timeout from the accept, so that a TLS or WebSocket
/// handshake spends from the same allowance rather than adding to it) is closed.
pub(crate) async fn run<P, R>(
    protocol: &mut P,
    mut reader: R,
    context: &ConnectionContext,
    peer: &str,
    connect_deadline: Instant,
) where
    P: Protocol,
    R: AsyncRead + Unpin,
{
    // Sized by what the client sends: an idle connection holds half a KiB.
    let mut buffer = ReadBuffer::default();
    let deadline = tokio::time::sleep_until(connect_deadline);
    tokio::pin!(deadline);
    let shutdown = context.shutdown.clone();
    let core = &context.core;
    loop {
        let paused = protocol.reading_paused();
        let event: Event<P> = {
            let parts = protocol.parts();
            let room = parts.output.has_room();
            let logging_in = parts.login.is_pending();
            let connection = parts.connection;
            tokio::select! {
                _ = shutdown.cancelled() => Event::Shutdown,
                () = close_requested(parts.listed) => Event::Closed,
                read = buffer.read_from(&mut reader), if !paused && !logging_in => Event::Read(read),
                (request, outcome) = parts.login.outcome(), if logging_in => Event::Login(request, outcome),
                // A client that does not read leaves its deliveries in the channel, where the
                // queues count them in flight, instead of encoded in the writer's.
                Some(delivery) = parts.deliveries.recv(), if room => Event::Delivery(delivery),
                () = parts.output.room(), if !room => Event::Room,
                Some(notice) = parts.notices.recv() => Event::Notice(*notice),
                admitted = parts.held.next(core, connection), if !parts.held.is_empty() => Event::Admitted(admitted),
                work = parts.work => Event::Work(work),
                () = &mut deadline => Event::Deadline,
            }
        };
        // Only what the client sends moves the read deadline.
        let heard = matches!(event, Event::Read(_) | Event::Login(..));
        let step = match event {
            Event::Shutdown => protocol.on_shutdown(),
            Event::Closed => {
                tracing::info!(%peer, "connection closed by an administrator");
                protocol.on_admin_close()
            }
            Event::Read(read) => {
                if buffer.closed_by(&read, peer) {
                    return;
                }
                let step = protocol.on_input(buffer.bytes());
                buffer.decoded();
                step
            }
            Event::Login(request, outcome) => {
                let step = protocol.on_login(request, outcome, buffer.bytes());
                buffer.decoded();
                step
            }
            Event::Delivery(delivery) => {
                protocol.on_delivery(delivery);
                // The deliveries already queued go out in the same turn: one pass through
                // the select above per message was a visible share of a dispatch's cost.
                for _ in 1..DELIVERIES_PER_TURN {
                    let next = {
                        let parts = protocol.parts();
                        match parts.output.has_room() {
                            true => parts.deliveries.try_recv().ok(),
                            false => None,
                        }
                    };
                    let Some(next) = next else { break };
                    protocol.on_delivery(next);
                }
                Step::Continue
            }
            Event::Room => Step::Continue,
            Event::Notice(notice) => protocol.on_notice(notice),
            Event::Admitted(admitted) => {
                protocol.on_admitted(admitted);
                if !buffer.is_empty() && !protocol.reading_paused() {
                    // A pause may have left whole commands in the buffer: decode them now,
                    // since no read may come to wake them.
                    let step = protocol.on_input(buffer.bytes());
                    buffer.decoded();
                    step
                } else {
                    Step::Continue
                }
            }
            Event::Work(work) => protocol.on_work(work),
            Event::Deadline => {
                let now = Instant::now();
                if protocol.reading_paused() {
                    // The client's heart-beats wait unread behind what the protocol holds.
                    let next = protocol.read_deadline(now).unwrap_or(now + context.connect_timeout);
                    deadline.as_mut().reset(next);
                    continue;
                }
                protocol.on_silence();
                Step::Stop
            }
        };
        match step {
            Step::Continue if heard => {
                if let Some(next) = protocol.read_deadline(Instant::now()) {
                    deadline.as_mut().reset(next);
                }
            }
            Step::Continue => {}
            Step::Finish => {
                protocol.on_finish().await;
                return;
            }
            Step::Stop => return,
        }
    }
}

/// Resolves once an administrator asked `listed` to close; never for a connection not listed.
async fn close_requested(listed: Option<&ConnectionEntry>) {
    match listed {
        Some(entry) => entry.close_requested().await,
        None => std::future::pending().await,
    }
}

/// The read deadline of a connection past its handshake that expects the client at least
/// every `limit`; none, a deadline as good as never.
pub(crate) fn silence_deadline(now: Instant, limit: Option<std::time::Duration>) -> Instant {
    now + limit.unwrap_or(std::time::Duration::from_secs(60 * 60 * 24 * 365))
}

#[cfg(test)]
mod tests {
    //! The loop's rules with a protocol that only records what it is told, over an in-memory
    //! socket, in paused time.

    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::session::Session;

    /// Finishes its handshake on a `!`; expects the client every [`LIMIT`] after it.
    struct Recorder {
        session: Session<()>,
        output: Output,
        held: HeldSends<(), ()>,
        login: PendingLogin<()>,
        work: mpsc::UnboundedReceiver<()>,
        handshaken: bool,
        /// When each call came, by name.
        calls: Vec<(&'static str, Instant)>,
    }

    const LIMIT: Duration = Duration::from_secs(10);
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

    impl Protocol for Recorder {
        type Login = ();
        type HeldKey = ();
        type Held = ();
        type Work = ();

        fn parts(&mut self) -> Parts<'_, (), (), (), impl Future<Output = ()> + Send> {
            let work = &mut self.work;
            let work = async move {
                if work.recv().await.is_none() {
                    std::future::pending::<()>().await
                }
            };
            Parts::of(&mut self.session, &self.output, &mut self.held, &mut self.login, work)
        }

        fn on_input(&mut self, buffer: &mut BytesMut) -> Step {
            self.handshaken |= buffer.contains(&b'!');
            buffer.clear();
            self.calls.push(("input", Instant::now()));
            Step::Continue
        }

        fn on_login(&mut self, (): (), _: Result<Subject, AuthError>, _: &mut BytesMut) -> Step {
            Step::Continue
        }

        fn on_delivery(&mut self, _: Delivery) {}

        fn on_notice(&mut self, _: ConsumerNotice) -> Step {
            Step::Continue
        }

        fn on_admitted(&mut self, _: Admitted<()>) {}

        fn on_work(&mut self, (): ()) -> Step {
            self.calls.push(("work", Instant::now()));
            Step::Continue
        }

        fn read_deadline(&self, now: Instant) -> Option<Instant> {
            self.handshaken.then_some(now + LIMIT)
        }

        fn on_silence(&mut self) {
            self.calls.push(("silence", Instant::now()));
        }

        async fn on_finish(&mut self) {
            self.calls.push(("finish", Instant::now()));
        }
    }

    fn context() -> Arc<ConnectionContext> {
        ConnectionContext::for_tests(CONNECT_TIMEOUT)
    }

    /// Runs a [`Recorder`] on one end of an in-memory socket; the other end, the sender of
    /// its work, and the task that returns the recorder once the connection ends.
    fn start(
        context: &Arc<ConnectionContext>,
    ) -> (
        tokio::io::DuplexStream,
        mpsc::UnboundedSender<()>,
        tokio::task::JoinHandle<(Instant, Recorder)>,
    ) {
        let (client, server) = tokio::io::duplex(1024);
        let (reader, writer) = tokio::io::split(server);
        let (output, _writer) = super::super::writer::spawn(writer, context.core.clone());
        let (work_tx, work) = mpsc::unbounded_channel();
        let mut recorder = Recorder {
            session: Session::new(context.clone()),
            output,
            held: HeldSends::default(),
            login: PendingLogin::default(),
            work,
            handshaken: false,
            calls: Vec::new(),
        };
        let context = context.clone();
        let task = tokio::spawn(async move {
            let connect_deadline = Instant::now() + context.connect_timeout;
            run(&mut recorder, reader, &context, "test", connect_deadline).await;
            (Instant::now(), recorder)
        });
        (client, work_tx, task)
    }

    #[tokio::test(start_paused = true)]
    async fn input_during_the_handshake_does_not_move_the_connect_timeout() {
        let context = context();
        let started = Instant::now();
        let (mut client, _work, task) = start(&context);
        let trickle = async {
            loop {
                if client.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        let (ended, recorder) = tokio::select! {
            ended = task => ended.expect("the connection task ends cleanly"),
            () = trickle => panic!("the connection closed its socket before its task ended"),
            () = tokio::time::sleep(CONNECT_TIMEOUT * 3) => panic!("the handshake outlived its timeout"),
        };
        let after = ended - started;
        assert!(
            after >= CONNECT_TIMEOUT && after < CONNECT_TIMEOUT + Duration::from_millis(100),
            "{after:?}"
        );
        assert_eq!(recorder.calls.last().map(|c| c.0), Some("silence"));
        assert!(recorder.calls.iter().filter(|c| c.0 == "input").count() >= 4);
    }

    #[tokio::test(start_paused = true)]
    async fn only_what_the_client_sends_moves_the_read_deadline() {
        let context = context();
        let (mut client, work, task) = start(&context);
        client.write_all(b"!").await.expect("the connection reads");
        let heard = Instant::now();
        // Broker-side work keeps coming: it must not keep a silent client's connection open.
        let busy = async {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if work.send(()).is_err() {
                    return;
                }
            }
        };
        let (ended, recorder) = tokio::select! {
            ended = task => ended.expect("the connection task ends cleanly"),
            () = busy => unreachable!("the work channel stays open while the task runs"),
            () = tokio::time::sleep(LIMIT * 3) => panic!("a silent client was kept past its deadline"),
        };
        assert!(recorder.calls.iter().any(|c| c.0 == "work"));
        assert_eq!(recorder.calls.last().map(|c| c.0), Some("silence"));
        let after = ended - heard;
        assert!(after >= LIMIT && after < LIMIT + Duration::from_millis(100), "{after:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_finishes_what_is_pending_before_the_connection_ends() {
        let context = context();
        let (_client, _work, task) = start(&context);
        tokio::time::sleep(Duration::from_secs(1)).await;
        context.shutdown.cancel();
        let (_, recorder) = task.await.expect("the connection task ends cleanly");
        assert_eq!(recorder.calls.iter().map(|c| c.0).collect::<Vec<_>>(), ["finish"]);
    }
}
