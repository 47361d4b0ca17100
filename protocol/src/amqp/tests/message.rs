//! Messages (every section, every body kind, annotations kept as sent) and deliveries that
//! span transfers.

use bytes::{Bytes, BytesMut};

use super::{frame_bytes, MAX_DEPTH};
use crate::amqp::{
    split_transfer, Annotations, ApplicationProperties, Assembled, Body, Delivery,
    DeliveryAssembler, DeliveryState, Descriptor, Frame, Header, Message, MessageId, Properties,
    Transfer, Value, WireError,
};

fn round_trip(message: &Message) -> Bytes {
    let bytes = message.to_bytes().expect("encodes");
    assert_eq!(&Message::decode(&bytes, MAX_DEPTH).expect("decodes"), message);
    bytes
}

fn annotations() -> Annotations {
    let mut annotations = Annotations::default();
    annotations.insert("x-opt-jms-msg-type", Value::Byte(5));
    annotations.insert("x-opt-unknown-to-us", Value::List(vec![Value::from("kept")]));
    annotations.0.push((Value::Ulong(0x1234), Value::Timestamp(99)));
    annotations
}

fn full_message(body: Body) -> Message {
    let mut application = ApplicationProperties::default();
    application.insert("name", "value");
    application.insert("count", Value::Int(3));
    application.insert("ratio", Value::Double(0.5));
    application.insert("flag", Value::Boolean(true));
    application.insert("nothing", Value::Null);
    Message {
        header: Some(Header {
            durable: Some(true),
            priority: Some(9),
            ttl: Some(60_000),
            first_acquirer: Some(false),
            delivery_count: Some(2),
        }),
        delivery_annotations: Some(annotations()),
        message_annotations: Some(annotations()),
        properties: Some(Properties {
            message_id: Some(MessageId::String("ID:1".into())),
            user_id: Some(Bytes::from_static(b"guest")),
            to: Some("queue://a".into()),
            subject: Some("greeting".into()),
            reply_to: Some("temp-queue://r".into()),
            correlation_id: Some(MessageId::from("corr-1")),
            content_type: Some("text/plain".into()),
            content_encoding: Some("gzip".into()),
            absolute_expiry_time: Some(1_700_000_060_000),
            creation_time: Some(1_700_000_000_000),
            group_id: Some("g".into()),
            group_sequence: Some(7),
            reply_to_group_id: Some("rg".into()),
        }),
        application_properties: Some(application),
        body,
        footer: Some(annotations()),
    }
}

#[test]
fn every_section_and_body_kind_round_trips() {
    let bodies = [
        Body::Empty,
        Body::Data(vec![Bytes::from_static(b"one")]),
        Body::Data(vec![Bytes::from_static(b"one"), Bytes::new(), Bytes::from(vec![7; 1000])]),
        Body::Sequence(vec![vec![Value::Int(1), Value::from("two")], vec![]]),
        Body::Value(Value::from("hello")),
        Body::Value(Value::Null),
        Body::Value(Value::Map(vec![(Value::from("k"), Value::Long(1 << 40))])),
    ];
    for body in bodies {
        round_trip(&full_message(body.clone()));
        round_trip(&Message { body, ..Message::default() });
    }
    round_trip(&Message::default());
}

#[test]
fn message_ids_of_every_type_round_trip() {
    for id in [
        MessageId::Ulong(42),
        MessageId::Uuid([9; 16]),
        MessageId::Binary(Bytes::from_static(&[0, 1])),
        MessageId::String("ID:x".into()),
    ] {
        let properties = Properties {
            message_id: Some(id.clone()),
            correlation_id: Some(id),
            ..Properties::default()
        };
        round_trip(&Message { properties: Some(properties), ..Message::with_value("x") });
    }
}

#[test]
fn defaults_apply_to_an_empty_header() {
    let header = Header::default();
    assert!(!header.durable());
    assert_eq!(header.priority(), 4);
    assert_eq!(header.delivery_count(), 0);
}

#[test]
fn a_simple_message_encodes_as_the_spec_lays_it_out() {
    let message = Message {
        header: Some(Header { durable: Some(true), ..Header::default() }),
        ..Message::with_value("hi")
    };
    let bytes = round_trip(&message);
    assert_eq!(
        &bytes[..],
        &[0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41, 0x00, 0x53, 0x77, 0xa1, 0x02, b'h', b'i']
    );
    let data = round_trip(&Message::with_data(Bytes::from_static(b"\x01")));
    assert_eq!(&data[..], &[0x00, 0x53, 0x75, 0xa0, 0x01, 0x01]);
}

fn section(code: u64, value: Value) -> Vec<u8> {
    let mut dst = BytesMut::new();
    crate::amqp::encode_value(&Value::described(Descriptor::Code(code), value), &mut dst).unwrap();
    dst.to_vec()
}

#[test]
fn sections_out_of_order_or_repeated_or_mixed_are_errors() {
    let value = section(0x77, Value::from("v"));
    let header = section(0x70, Value::List(vec![]));
    let data = section(0x75, Value::Binary(Bytes::new()));
    let sequence = section(0x76, Value::List(vec![]));
    let bad = [
        [value.clone(), header.clone()].concat(),
        [header.clone(), header.clone()].concat(),
        [value.clone(), value.clone()].concat(),
        [data.clone(), sequence.clone()].concat(),
        [data.clone(), value.clone()].concat(),
        section(0x79, Value::Null),
        section(0x75, Value::from("not binary")),
        section(0x74, Value::Map(vec![(Value::Int(1), Value::Null)])),
        section(0x72, Value::Map(vec![(Value::from("string key"), Value::Null)])),
        vec![0x40],
    ];
    for bytes in bad {
        let result = Message::decode(&Bytes::from(bytes.clone()), MAX_DEPTH);
        assert!(
            matches!(result, Err(WireError::UnexpectedValue { .. })),
            "{bytes:02x?}: {result:?}"
        );
    }
    // Repeated data and sequence sections are one body.
    let two = Message::decode(&Bytes::from([data.clone(), data].concat()), MAX_DEPTH).unwrap();
    assert_eq!(two.body, Body::Data(vec![Bytes::new(), Bytes::new()]));
}

#[test]
fn symbolic_section_descriptors_are_accepted() {
    let mut dst = BytesMut::new();
    let value = Value::described(Descriptor::Symbol("amqp:amqp-value:*".into()), Value::Int(1));
    crate::amqp::encode_value(&value, &mut dst).unwrap();
    let message = Message::decode(&dst.freeze(), MAX_DEPTH).unwrap();
    assert_eq!(message.body, Body::Value(Value::Int(1)));
}

#[test]
fn annotations_we_do_not_know_survive_the_round_trip() {
    let message = Message { message_annotations: Some(annotations()), ..Message::with_value(1i32) };
    let again = Message::decode(&round_trip(&message), MAX_DEPTH).unwrap();
    let kept = again.message_annotations.unwrap();
    assert_eq!(kept.get("x-opt-unknown-to-us"), Some(&Value::List(vec![Value::from("kept")])));
    assert_eq!(kept.0.len(), 3);
}

fn transfer(delivery_id: u32, more: bool) -> Transfer {
    Transfer {
        handle: 1,
        delivery_id: Some(delivery_id),
        delivery_tag: Some(Bytes::from(delivery_id.to_be_bytes().to_vec())),
        message_format: Some(0),
        more: more.then_some(true),
        ..Transfer::default()
    }
}

#[test]
fn a_single_transfer_is_a_delivery_without_copying() {
    let mut assembler = DeliveryAssembler::new(1 << 20);
    let payload = Bytes::from_static(b"payload");
    let Assembled::Complete(Delivery { transfer: t, payload: p }) =
        assembler.push(transfer(0, false), payload.clone()).unwrap()
    else {
        panic!()
    };
    assert_eq!(t, transfer(0, false));
    assert_eq!(p.as_ptr(), payload.as_ptr());
    assert!(!assembler.is_in_progress());
}

#[test]
fn transfers_with_more_are_joined_and_take_the_last_settlement() {
    let mut assembler = DeliveryAssembler::new(1 << 20);
    assert_eq!(
        assembler.push(transfer(5, true), Bytes::from_static(b"ab")),
        Ok(Assembled::Incomplete)
    );
    assert!(assembler.is_in_progress());
    // Continuations may leave out the delivery id and tag.
    let continuation = Transfer { handle: 1, more: Some(true), ..Transfer::default() };
    assert_eq!(assembler.push(continuation, Bytes::from_static(b"cd")), Ok(Assembled::Incomplete));
    let last = Transfer {
        handle: 1,
        settled: Some(true),
        state: Some(DeliveryState::Accepted),
        ..Transfer::default()
    };
    let Assembled::Complete(delivery) = assembler.push(last, Bytes::from_static(b"e")).unwrap()
    else {
        panic!()
    };
    assert_eq!(&delivery.payload[..], b"abcde");
    assert_eq!(delivery.transfer.delivery_id, Some(5));
    assert!(delivery.transfer.settled());
    assert_eq!(delivery.transfer.state, Some(DeliveryState::Accepted));
    assert!(!delivery.transfer.more());
}

#[test]
fn a_delivery_above_the_limit_fails_before_buffering() {
    let mut assembler = DeliveryAssembler::new(10);
    assembler.push(transfer(0, true), Bytes::from(vec![0; 6])).unwrap();
    assert_eq!(
        assembler.push(transfer(0, true), Bytes::from(vec![0; 6])),
        Err(WireError::MessageTooLarge { size: 12, max: 10 })
    );
    let mut assembler = DeliveryAssembler::new(10);
    assert!(matches!(
        assembler.push(transfer(0, false), Bytes::from(vec![0; 11])),
        Err(WireError::MessageTooLarge { .. })
    ));
}

#[test]
fn a_transfer_of_another_delivery_in_the_middle_is_an_error() {
    let mut assembler = DeliveryAssembler::new(1 << 20);
    assembler.push(transfer(0, true), Bytes::from_static(b"a")).unwrap();
    let err = assembler.push(transfer(1, false), Bytes::from_static(b"b")).unwrap_err();
    assert!(matches!(err, WireError::InterleavedTransfer { .. }), "{err}");
    let mut assembler = DeliveryAssembler::new(1 << 20);
    assembler.push(transfer(0, true), Bytes::from_static(b"a")).unwrap();
    let other_link = Transfer { handle: 2, ..Transfer::default() };
    assert!(assembler.push(other_link, Bytes::new()).is_err());
}

#[test]
fn an_aborted_delivery_is_discarded() {
    let mut assembler = DeliveryAssembler::new(1 << 20);
    assembler.push(transfer(0, true), Bytes::from_static(b"a")).unwrap();
    let abort = Transfer { handle: 1, aborted: Some(true), ..Transfer::default() };
    assert!(
        matches!(assembler.push(abort, Bytes::new()), Ok(Assembled::Aborted(t)) if t.delivery_id == Some(0))
    );
    assert!(!assembler.is_in_progress());
    // The next delivery starts afresh.
    assert!(matches!(assembler.push(transfer(1, false), Bytes::new()), Ok(Assembled::Complete(_))));
}

#[test]
fn split_transfers_fit_the_frame_size_and_join_back() {
    let payload = Bytes::from((0..100_000u32).map(|i| i as u8).collect::<Vec<u8>>());
    for max_frame_size in [512u32, 4096, 32_768, 100_100] {
        let frames =
            split_transfer(3, &transfer(9, false), payload.clone(), max_frame_size).unwrap();
        let mut assembler = DeliveryAssembler::new(1 << 20);
        let mut delivered = None;
        for (i, frame) in frames.iter().enumerate() {
            let size = frame_bytes(&Frame::Amqp(frame.clone())).len();
            assert!(size <= max_frame_size as usize, "{max_frame_size}: frame {i} is {size}");
            if i + 1 < frames.len() {
                assert_eq!(size, max_frame_size as usize, "all but the last are full");
            }
            assert_eq!(frame.channel, 3);
            let crate::amqp::Performative::Transfer(t) = &frame.performative else { panic!() };
            assert_eq!(t.more(), i + 1 < frames.len());
            if let Assembled::Complete(d) =
                assembler.push(t.clone(), frame.payload.clone()).unwrap()
            {
                delivered = Some(d);
            }
        }
        let delivered = delivered.expect("complete");
        assert_eq!(delivered.payload, payload);
        assert_eq!(delivered.transfer, transfer(9, false));
    }
    let one = split_transfer(0, &transfer(0, false), Bytes::from_static(b"small"), 512).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].payload, Bytes::from_static(b"small"));
}

#[test]
fn a_frame_size_too_small_for_the_performative_is_an_error() {
    let err = split_transfer(0, &transfer(0, false), Bytes::from(vec![0; 100]), 20).unwrap_err();
    assert!(matches!(err, WireError::FrameTooLarge { max: 20, .. }), "{err}");
}
