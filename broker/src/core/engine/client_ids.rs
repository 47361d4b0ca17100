//! The client ids of connected clients: one live connection per id. A JMS, STOMP or AMQP
//! connection that claims an id another holds is refused, as ActiveMQ refuses it; an MQTT
//! connection takes the id over instead (MQTT-3.1.4-3): the holder, if it claimed the id as
//! one that yields, is asked to close, and the newcomer claims the id once the holder has
//! released it.
//!
//! Nothing here waits: asking a holder to close is cancelling its token, and the newcomer
//! waits on the holder's release token with the table's lock already let go (the no-deadlock
//! rule: never wait holding a lock).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::core::types::ConnectionId;

/// Who holds one client id.
struct Holder {
    connection: ConnectionId,
    /// Cancelled to ask the holder to close; `None` for a holder that does not yield.
    close: Option<CancellationToken>,
    /// Cancelled once the holder has released the id.
    released: CancellationToken,
}

/// The client id table.
#[derive(Default)]
pub(super) struct ClientIds {
    holders: Mutex<HashMap<Arc<str>, Holder>>,
}

/// What a client id that another connection holds asks of a newcomer.
#[derive(Debug)]
pub enum ClientIdHeld {
    /// The holder was asked to close: the token is cancelled once it has released the id.
    Yielding(CancellationToken),
    /// The holder does not yield its id (not an MQTT connection).
    Refusing,
}

impl ClientIds {
    /// Claims `client_id` for `connection`; false if another connection holds it. `close`
    /// is how to ask `connection` to give the id up to a newcomer (none: it never does).
    pub(super) fn claim(
        &self,
        client_id: &str,
        connection: ConnectionId,
        close: Option<CancellationToken>,
    ) -> bool {
        let mut holders = self.holders.lock();
        match holders.get(client_id) {
            Some(holder) => holder.connection == connection,
            None => {
                let released = CancellationToken::new();
                holders.insert(client_id.into(), Holder { connection, close, released });
                true
            }
        }
    }

    /// Asks the connection other than `connection` that holds `client_id` to close, if it
    /// yields; `None` if nobody else holds the id.
    pub(super) fn take_over(
        &self,
        client_id: &str,
        connection: ConnectionId,
    ) -> Option<ClientIdHeld> {
        let holders = self.holders.lock();
        let holder = holders.get(client_id).filter(|holder| holder.connection != connection)?;
        Some(match &holder.close {
            Some(close) => {
                close.cancel();
                ClientIdHeld::Yielding(holder.released.clone())
            }
            None => ClientIdHeld::Refusing,
        })
    }

    /// Releases the client id `connection` claimed, if any, and wakes who waits for it.
    pub(super) fn release(&self, connection: ConnectionId) {
        self.holders.lock().retain(|_, holder| {
            let keep = holder.connection != connection;
            if !keep {
                holder.released.cancel();
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusing_holder_keeps_its_id_and_a_yielding_one_is_asked_to_close() {
        let ids = ClientIds::default();
        assert!(ids.claim("jms", ConnectionId(1), None));
        assert!(!ids.claim("jms", ConnectionId(2), None));
        assert!(matches!(ids.take_over("jms", ConnectionId(2)), Some(ClientIdHeld::Refusing)));

        let close = CancellationToken::new();
        assert!(ids.claim("mqtt", ConnectionId(3), Some(close.clone())));
        assert!(ids.take_over("mqtt", ConnectionId(3)).is_none(), "its own id");
        let Some(ClientIdHeld::Yielding(released)) = ids.take_over("mqtt", ConnectionId(4)) else {
            panic!("a yielding holder")
        };
        assert!(close.is_cancelled() && !released.is_cancelled());
        assert!(!ids.claim("mqtt", ConnectionId(4), None), "not released yet");
        ids.release(ConnectionId(3));
        assert!(released.is_cancelled());
        assert!(ids.claim("mqtt", ConnectionId(4), None));
        assert!(ids.take_over("free", ConnectionId(4)).is_none());
    }
}
