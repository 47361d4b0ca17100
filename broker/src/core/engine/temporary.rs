//! Temporary queues and topics: created by a connection, announced, and gone with it.

use store::{Destination, DestinationKind, QueueKey};

use crate::core::queue::QueueCommand;
use crate::core::registry::{Registry, Temporary};
use crate::core::types::ConnectionId;
use crate::core::types::{
    CoreError, ADVISORY_DESTINATION, ADVISORY_OPERATION, ADVISORY_TEMP_QUEUE, ADVISORY_TEMP_TOPIC,
};

use super::Core;

impl Core {
    /// Creates a temporary queue or topic owned by `connection`; it goes when the connection
    /// releases it or closes. Announced on the `ActiveMQ.Advisory.Temp*` topics, which the
    /// ActiveMQ JMS client watches before it sends to a temporary destination.
    pub fn create_temporary(
        &self,
        destination: Destination,
        connection: ConnectionId,
    ) -> Result<(), CoreError> {
        let mut registry = self.registry.lock();
        if registry.temporary.contains_key(&destination) {
            return Ok(());
        }
        let queue = match destination.kind {
            DestinationKind::TempQueue => Some(registry.spawn_queue(
                QueueKey::destination(destination.clone()),
                false,
                &self.factory,
            )?),
            DestinationKind::TempTopic => None,
            _ => return Err(CoreError::NotTemporary(destination.to_string())),
        };
        registry.temporary.insert(destination.clone(), Temporary { owner: connection, queue });
        self.advise(&mut registry, &destination, "add");
        Ok(())
    }

    /// Deletes a temporary destination of `connection`. Refused while another connection
    /// consumes from it, or when `connection` does not own it.
    pub fn delete_temporary(
        &self,
        destination: &Destination,
        connection: ConnectionId,
    ) -> Result<(), CoreError> {
        let mut registry = self.registry.lock();
        match registry.temporary.get(destination) {
            None => return Ok(()),
            Some(temporary) if temporary.owner != connection => {
                return Err(CoreError::NotOwner(destination.to_string()))
            }
            Some(_) => {}
        }
        self.drop_temporary(&mut registry, destination);
        Ok(())
    }

    /// Deletes every temporary destination `connection` created (it is closing).
    pub fn release_connection(&self, connection: ConnectionId) {
        let mut registry = self.registry.lock();
        let owned: Vec<Destination> = registry
            .temporary
            .iter()
            .filter(|(_, temporary)| temporary.owner == connection)
            .map(|(destination, _)| destination.clone())
            .collect();
        for destination in owned {
            self.drop_temporary(&mut registry, &destination);
        }
        self.advise_connection_closed(&mut registry, connection);
    }

    pub(super) fn drop_temporary(&self, registry: &mut Registry, destination: &Destination) {
        if let Some(temporary) = registry.temporary.remove(destination) {
            if let Some(queue) = temporary.queue {
                queue.send(QueueCommand::Stop);
            }
            registry.audit.forget(destination);
            registry.recent.forget(destination);
            self.advise(registry, destination, "remove");
        }
    }

    /// Publishes an advisory about a temporary destination (`operation` is "add" or
    /// "remove") to `ActiveMQ.Advisory.TempQueue` or `ActiveMQ.Advisory.TempTopic`. The
    /// message carries the destination and operation as properties; each protocol adapter
    /// renders it the way its clients expect (OpenWire: a DestinationInfo).
    pub(super) fn advise(
        &self,
        registry: &mut Registry,
        destination: &Destination,
        operation: &str,
    ) {
        let topic = match destination.kind {
            DestinationKind::TempQueue => ADVISORY_TEMP_QUEUE,
            DestinationKind::TempTopic => ADVISORY_TEMP_TOPIC,
            _ => return,
        };
        let properties = vec![
            (ADVISORY_DESTINATION, store::PropertyValue::String(destination.to_string().into())),
            (ADVISORY_OPERATION, store::PropertyValue::String(operation.into())),
        ];
        self.publish_advisory(registry, topic, properties);
    }
}
