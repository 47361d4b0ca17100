//! Tests of the record encodings: exact round trips, and corrupt input refused without panics.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

fn full_message() -> Message {
    let mut message =
        Message::new(MessageId(u64::MAX - 1), "ID:host-1:2:3:4:5", Destination::queue("ORDERS.EU"));
    message.headers = JmsHeaders {
        correlation_id: Some("corr-1".into()),
        reply_to: Some(Destination { kind: DestinationKind::TempQueue, name: "reply.1".into() }),
        message_type: Some("order".into()),
        priority: 9,
        expiration: 1_700_000_060_000,
        timestamp: -5,
        delivery_mode: DeliveryMode::NonPersistent,
        group_id: Some("group-a".into()),
        group_seq: -3,
    };
    let properties: [(&str, PropertyValue); 11] = [
        ("bool", PropertyValue::Bool(true)),
        ("byte", PropertyValue::Byte(i8::MIN)),
        ("short", PropertyValue::Short(i16::MIN)),
        ("int", PropertyValue::Int(i32::MIN)),
        ("long", PropertyValue::Long(i64::MIN)),
        ("float", PropertyValue::Float(f32::MIN_POSITIVE)),
        ("double", PropertyValue::Double(-f64::MAX)),
        ("string", PropertyValue::String("héllo wörld".into())),
        ("bytes", PropertyValue::Bytes(Bytes::from_static(b"\x00\xff\x10"))),
        ("char", PropertyValue::Char('\u{1F980}')),
        ("null", PropertyValue::Null),
    ];
    for (name, value) in properties {
        message.properties.insert(name.into(), value);
    }
    message.body_kind = BodyKind::Map;
    message.body_encoding = "openwire".into();
    message.body = Bytes::from_static(b"\x01\x02 map body");
    message.original_destination = Some(Destination::topic("ORDERS.ALL"));
    message
}

#[test]
fn full_message_round_trips() {
    let message = full_message();
    assert_eq!(decode_message(&encode_message(&message)).expect("decode"), message);
}

#[test]
fn default_message_round_trips() {
    let message = Message::new(MessageId(0), "", Destination::topic("T"));
    assert_eq!(decode_message(&encode_message(&message)).expect("decode"), message);
}

#[test]
fn every_destination_kind_body_kind_and_delivery_mode_round_trips() {
    let kinds = [
        DestinationKind::Queue,
        DestinationKind::Topic,
        DestinationKind::TempQueue,
        DestinationKind::TempTopic,
    ];
    let bodies = [
        BodyKind::None,
        BodyKind::Text,
        BodyKind::Bytes,
        BodyKind::Map,
        BodyKind::Stream,
        BodyKind::Object,
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        let destination = Destination { kind, name: format!("D.{i}").into() };
        assert_eq!(
            decode_destination(&encode_destination(&destination)).expect("decode"),
            destination
        );
        for body_kind in bodies {
            for mode in [DeliveryMode::Persistent, DeliveryMode::NonPersistent] {
                let mut message = Message::new(MessageId(i as u64), "m", destination.clone());
                message.body_kind = body_kind;
                message.headers.delivery_mode = mode;
                assert_eq!(decode_message(&encode_message(&message)).expect("decode"), message);
            }
        }
    }
}

#[test]
fn out_of_range_priority_round_trips_raw() {
    let mut message = full_message();
    message.headers.priority = 200;
    let decoded = decode_message(&encode_message(&message)).expect("decode");
    assert_eq!(decoded.headers.priority, 200);
    assert_eq!(decoded.priority(), 9);
}

#[test]
fn nan_and_infinite_floats_keep_their_bits() {
    let mut message = Message::new(MessageId(1), "m", Destination::queue("Q"));
    let nan32 = f32::from_bits(0x7fc0_1234);
    let nan64 = f64::from_bits(0x7ff8_0000_dead_beef);
    message.properties.insert("f".into(), PropertyValue::Float(nan32));
    message.properties.insert("d".into(), PropertyValue::Double(nan64));
    message.properties.insert("inf".into(), PropertyValue::Double(f64::NEG_INFINITY));
    let decoded = decode_message(&encode_message(&message)).expect("decode");
    match (&decoded.properties["f"], &decoded.properties["d"], &decoded.properties["inf"]) {
        (PropertyValue::Float(f), PropertyValue::Double(d), PropertyValue::Double(inf)) => {
            assert_eq!(f.to_bits(), nan32.to_bits());
            assert_eq!(d.to_bits(), nan64.to_bits());
            assert_eq!(*inf, f64::NEG_INFINITY);
        }
        other => panic!("wrong property types {other:?}"),
    }
}

#[test]
fn large_body_round_trips() {
    let mut message = full_message();
    message.body = Bytes::from((0..2 * 1024 * 1024).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    assert_eq!(decode_message(&encode_message(&message)).expect("decode"), message);
}

#[test]
fn queue_keys_and_subscriptions_round_trip() {
    let key = SubscriptionKey { client_id: "client-1".into(), name: "sub".into() };
    let plain = QueueKey::destination(Destination::queue("Q"));
    let durable =
        QueueKey { destination: Destination::topic("T.>"), subscription: Some(key.clone()) };
    for queue in [plain, durable] {
        assert_eq!(decode_queue_key(&encode_queue_key(&queue)).expect("decode"), queue);
    }
    for (selector, no_local) in [(None, false), (Some("color = 'red'".into()), true)] {
        let info = SubscriptionInfo {
            key: key.clone(),
            topic: Destination::topic("T.*"),
            selector,
            no_local,
        };
        assert_eq!(decode_subscription(&encode_subscription(&info)).expect("decode"), info);
    }
}

fn random_text(rng: &mut StdRng) -> String {
    let len = rng.gen_range(0..12);
    (0..len)
        .map(|_| if rng.gen_bool(0.8) { rng.gen_range('a'..='z') } else { rng.gen::<char>() })
        .collect()
}

fn random_bytes(rng: &mut StdRng, max: usize) -> Bytes {
    let len = rng.gen_range(0..max);
    Bytes::from((0..len).map(|_| rng.gen::<u8>()).collect::<Vec<u8>>())
}

fn random_destination(rng: &mut StdRng) -> Destination {
    let kind = match rng.gen_range(0..4) {
        0 => DestinationKind::Queue,
        1 => DestinationKind::Topic,
        2 => DestinationKind::TempQueue,
        _ => DestinationKind::TempTopic,
    };
    Destination { kind, name: random_text(rng).into() }
}

fn random_option(rng: &mut StdRng) -> Option<Arc<str>> {
    rng.gen_bool(0.5).then(|| random_text(rng).into())
}

fn random_property(rng: &mut StdRng) -> PropertyValue {
    match rng.gen_range(0..11) {
        0 => PropertyValue::Bool(rng.gen()),
        1 => PropertyValue::Byte(rng.gen()),
        2 => PropertyValue::Short(rng.gen()),
        3 => PropertyValue::Int(rng.gen()),
        4 => PropertyValue::Long(rng.gen()),
        // Finite values only: NaN != NaN (the NaN test checks bits instead).
        5 => PropertyValue::Float(rng.gen_range(-1e30f32..1e30)),
        6 => PropertyValue::Double(rng.gen_range(-1e300f64..1e300)),
        7 => PropertyValue::String(random_text(rng).into()),
        8 => PropertyValue::Bytes(random_bytes(rng, 16)),
        9 => PropertyValue::Char(rng.gen()),
        _ => PropertyValue::Null,
    }
}

fn random_message(rng: &mut StdRng) -> Message {
    let mut message = Message::new(MessageId(rng.gen()), random_text(rng), random_destination(rng));
    message.headers = JmsHeaders {
        correlation_id: random_option(rng),
        reply_to: rng.gen_bool(0.3).then(|| random_destination(rng)),
        message_type: random_option(rng),
        priority: rng.gen(),
        expiration: rng.gen(),
        timestamp: rng.gen(),
        delivery_mode: if rng.gen() {
            DeliveryMode::Persistent
        } else {
            DeliveryMode::NonPersistent
        },
        group_id: random_option(rng),
        group_seq: rng.gen(),
    };
    for _ in 0..rng.gen_range(0..8) {
        message.properties.insert(random_text(rng).into(), random_property(rng));
    }
    message.body_kind = match rng.gen_range(0..6) {
        0 => BodyKind::None,
        1 => BodyKind::Text,
        2 => BodyKind::Bytes,
        3 => BodyKind::Map,
        4 => BodyKind::Stream,
        _ => BodyKind::Object,
    };
    message.body_encoding = random_text(rng).into();
    message.body = random_bytes(rng, 256);
    message.original_destination = rng.gen_bool(0.3).then(|| random_destination(rng));
    message
}

#[test]
fn random_messages_round_trip() {
    let seed: u64 = rand::thread_rng().gen();
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..500 {
        let message = random_message(&mut rng);
        let decoded = decode_message(&encode_message(&message))
            .unwrap_or_else(|e| panic!("seed {seed}: {message:?} failed to decode: {e}"));
        assert_eq!(decoded, message, "seed {seed}");
    }
}

#[test]
fn damaged_encodings_never_panic() {
    let seed: u64 = rand::thread_rng().gen();
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..200 {
        let bytes = encode_message(&random_message(&mut rng));
        for cut in [0, bytes.len() / 3, bytes.len() / 2, bytes.len().saturating_sub(1)] {
            let _ = decode_message(&bytes[..cut]);
        }
        let mut flipped = bytes.clone();
        for _ in 0..rng.gen_range(1..4) {
            if flipped.is_empty() {
                break;
            }
            let at = rng.gen_range(0..flipped.len());
            flipped[at] ^= 1 << rng.gen_range(0..8);
        }
        let _ = decode_message(&flipped);
        let garbage: Vec<u8> = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect();
        let _ = decode_message(&garbage);
        let _ = decode_queue_key(&garbage);
        let _ = decode_subscription(&garbage);
        let _ = decode_destination(&garbage);
    }
}

fn assert_corrupt(result: Result<Message, StoreError>, what: &str) {
    match result {
        Err(StoreError::Corrupt { .. }) => {}
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    }
}

fn decode_record(record: &MessageRecord) -> Result<Message, StoreError> {
    decode_message(&record.encode_to_vec())
}

#[test]
fn unknown_enum_values_are_corrupt() {
    let good = MessageRecord::from(&full_message());

    let mut record = good.clone();
    record.body_kind = 99;
    assert_corrupt(decode_record(&record), "unknown body kind");
    record.body_kind = BodyKindRecord::Unspecified as i32;
    assert_corrupt(decode_record(&record), "unset body kind");

    let mut record = good.clone();
    if let Some(destination) = record.destination.as_mut() {
        destination.kind = -1;
    }
    assert_corrupt(decode_record(&record), "unknown destination kind");

    let mut record = good.clone();
    if let Some(headers) = record.headers.as_mut() {
        headers.delivery_mode = 7;
    }
    assert_corrupt(decode_record(&record), "unknown delivery mode");

    let mut record = good;
    if let Some(reply_to) = record.headers.as_mut().and_then(|h| h.reply_to.as_mut()) {
        reply_to.kind = 0;
    }
    assert_corrupt(decode_record(&record), "unset reply-to kind");
}

#[test]
fn missing_or_out_of_range_fields_are_corrupt() {
    let good = MessageRecord::from(&full_message());
    type Damage = Box<dyn Fn(&mut MessageRecord)>;
    let cases: Vec<(&str, Damage)> = vec![
        ("no destination", Box::new(|r| r.destination = None)),
        ("no headers", Box::new(|r| r.headers = None)),
        ("priority above 255", Box::new(|r| r.headers.iter_mut().for_each(|h| h.priority = 256))),
        ("property without value", Box::new(|r| r.properties[0].value = None)),
        (
            "byte out of range",
            Box::new(|r| r.properties[0].value = Some(PropertyValueRecord::Byte(128))),
        ),
        (
            "short out of range",
            Box::new(|r| r.properties[0].value = Some(PropertyValueRecord::Short(-40_000))),
        ),
        (
            "surrogate char",
            Box::new(|r| r.properties[0].value = Some(PropertyValueRecord::Char(0xD800))),
        ),
        (
            "char beyond Unicode",
            Box::new(|r| r.properties[0].value = Some(PropertyValueRecord::Char(0x11_0000))),
        ),
        ("duplicate property", Box::new(|r| r.properties.push(r.properties[0].clone()))),
    ];
    for (what, damage) in cases {
        let mut record = good.clone();
        damage(&mut record);
        assert_corrupt(decode_record(&record), what);
    }
}

#[test]
fn invalid_utf8_is_corrupt() {
    let mut bytes = encode_message(&Message::new(MessageId(1), "abc", Destination::queue("Q")));
    let at = bytes.windows(3).position(|w| w == b"abc").expect("message id is in the encoding");
    bytes[at] = 0xff;
    assert_corrupt(decode_message(&bytes), "invalid UTF-8 message id");
}

#[test]
fn half_a_subscription_queue_key_is_corrupt() {
    let record = QueueKeyRecord {
        destination: Some(DestinationRecord::from(&Destination::topic("T"))),
        client_id: Some("c".into()),
        subscription_name: None,
    };
    assert!(matches!(decode_queue_key(&record.encode_to_vec()), Err(StoreError::Corrupt { .. })));
    let record =
        SubscriptionRecord { client_id: "c".into(), name: "s".into(), ..Default::default() };
    assert!(matches!(
        decode_subscription(&record.encode_to_vec()),
        Err(StoreError::Corrupt { .. })
    ));
}
