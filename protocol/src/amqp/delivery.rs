//! Deliveries that span frames (the spec, part 2.6.14): a message larger than the peer's
//! max-frame-size travels as several transfers on one link, all but the last with `more`
//! set. [`DeliveryAssembler`] joins the payloads of incoming transfers, [`split_transfer`]
//! cuts an outgoing payload into frames that fit.

use bytes::{Bytes, BytesMut};

use super::error::WireError;
use super::frame::{AmqpFrame, FRAME_HEADER_LEN};
use super::performatives::Transfer;
use super::types::encoded_len;
use super::Composite;

/// A whole delivery, joined from its transfers.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The first transfer (delivery id, tag, format), with `settled` and `state` as the
    /// last transfer left them and `more` cleared.
    pub transfer: Transfer,
    /// The message bytes: every transfer's payload, in order.
    pub payload: Bytes,
}

/// What [`DeliveryAssembler::push`] did with a transfer.
#[derive(Debug, Clone, PartialEq)]
pub enum Assembled {
    /// The delivery continues in later transfers.
    Incomplete,
    /// The delivery is complete.
    Complete(Delivery),
    /// The sender aborted the delivery: what arrived of it is discarded.
    Aborted(Transfer),
}

/// Joins the transfers of one link's deliveries, one delivery at a time (a link's
/// transfers of one delivery are contiguous; different links each need their own
/// assembler).
#[derive(Debug)]
pub struct DeliveryAssembler {
    max_message_size: u64,
    in_progress: Option<(Transfer, Payload)>,
}

/// The payload so far: one transfer's bytes are kept as they are, without copying.
#[derive(Debug)]
enum Payload {
    One(Bytes),
    Joined(BytesMut),
}

impl Payload {
    fn len(&self) -> usize {
        match self {
            Payload::One(bytes) => bytes.len(),
            Payload::Joined(bytes) => bytes.len(),
        }
    }

    fn append(&mut self, more: &Bytes) {
        match self {
            Payload::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + more.len());
                joined.extend_from_slice(first);
                joined.extend_from_slice(more);
                *self = Payload::Joined(joined);
            }
            Payload::Joined(joined) => joined.extend_from_slice(more),
        }
    }

    fn freeze(self) -> Bytes {
        match self {
            Payload::One(bytes) => bytes,
            Payload::Joined(bytes) => bytes.freeze(),
        }
    }
}

impl DeliveryAssembler {
    /// An assembler refusing deliveries above `max_message_size` bytes (the link's
    /// max-message-size, or the broker's limit).
    pub fn new(max_message_size: u64) -> DeliveryAssembler {
        DeliveryAssembler { max_message_size, in_progress: None }
    }

    /// Whether a delivery is partly received.
    pub fn is_in_progress(&self) -> bool {
        self.in_progress.is_some()
    }

    /// Takes the next transfer of the link and its payload.
    ///
    /// Fails when the delivery grows beyond the limit (checked before copying) or when a
    /// continuation names another link, delivery id or tag than the delivery in progress.
    pub fn push(&mut self, transfer: Transfer, payload: Bytes) -> Result<Assembled, WireError> {
        let Some((first, mut so_far)) = self.in_progress.take() else {
            if transfer.aborted() {
                return Ok(Assembled::Aborted(transfer));
            }
            self.check_size(payload.len() as u64)?;
            return Ok(self.continue_or_finish(transfer, Payload::One(payload)));
        };
        let same_delivery = transfer.handle == first.handle
            && transfer.delivery_id.is_none_or(|id| Some(id) == first.delivery_id)
            && transfer
                .delivery_tag
                .as_ref()
                .is_none_or(|tag| Some(tag) == first.delivery_tag.as_ref());
        if !same_delivery {
            return Err(WireError::InterleavedTransfer {
                expected: describe(&first),
                found: describe(&transfer),
            });
        }
        if transfer.aborted() {
            return Ok(Assembled::Aborted(first));
        }
        self.check_size(so_far.len() as u64 + payload.len() as u64)?;
        so_far.append(&payload);
        let mut merged = first;
        if transfer.settled.is_some() {
            merged.settled = transfer.settled;
        }
        if transfer.state.is_some() {
            merged.state = transfer.state.clone();
        }
        merged.more = transfer.more;
        Ok(self.continue_or_finish(merged, so_far))
    }

    fn continue_or_finish(&mut self, transfer: Transfer, payload: Payload) -> Assembled {
        if transfer.more() {
            self.in_progress = Some((transfer, payload));
            return Assembled::Incomplete;
        }
        let mut transfer = transfer;
        transfer.more = None;
        Assembled::Complete(Delivery { transfer, payload: payload.freeze() })
    }

    fn check_size(&self, size: u64) -> Result<(), WireError> {
        if size > self.max_message_size {
            return Err(WireError::MessageTooLarge { size, max: self.max_message_size });
        }
        Ok(())
    }
}

fn describe(transfer: &Transfer) -> String {
    format!("handle {} delivery-id {:?}", transfer.handle, transfer.delivery_id)
}

/// Cuts `payload` into transfer frames on `channel` of at most `max_frame_size` bytes.
///
/// Every frame repeats `transfer`'s fields (as Qpid Proton does, so that each frame
/// stands on its own), all but the last with `more` set; the last keeps `transfer.more`.
/// Fails when not even one payload byte fits beside the performative.
pub fn split_transfer(
    channel: u16,
    transfer: &Transfer,
    payload: Bytes,
    max_frame_size: u32,
) -> Result<Vec<AmqpFrame>, WireError> {
    let max = usize::try_from(max_frame_size).unwrap_or(usize::MAX);
    let last_overhead = FRAME_HEADER_LEN + encoded_len(&transfer.to_value())?;
    if last_overhead + payload.len() <= max {
        return Ok(vec![AmqpFrame::transfer(channel, transfer.clone(), payload)]);
    }
    let mut continued = transfer.clone();
    continued.more = Some(true);
    let overhead = FRAME_HEADER_LEN + encoded_len(&continued.to_value())?;
    let room =
        max.checked_sub(overhead).filter(|&room| room > 0).ok_or(WireError::FrameTooLarge {
            size: overhead as u64 + 1,
            max: u64::from(max_frame_size),
        })?;
    let mut frames = Vec::with_capacity(payload.len() / room + 1);
    let mut rest = payload;
    while last_overhead + rest.len() > max {
        let chunk = rest.split_to(room.min(rest.len()));
        frames.push(AmqpFrame::transfer(channel, continued.clone(), chunk));
    }
    frames.push(AmqpFrame::transfer(channel, transfer.clone(), rest));
    Ok(frames)
}
