//! Performatives, SASL frames, termini, delivery states and transactions: round trips
//! through whole frames, the spec's rules for absent, null, mandatory and extra fields.

use bytes::{Bytes, BytesMut};

use super::{decode_all, frame_bytes};
use crate::amqp::sasl::{parse_plain, plain_response};
use crate::amqp::{
    condition, AmqpError, AmqpFrame, Annotations, Attach, AttachTarget, Begin, Close, Codec,
    Composite, Coordinator, Declare, Declared, Decoded, DeliveryState, Descriptor, Detach,
    Discharge, Disposition, End, ExpiryPolicy, Fields, Flow, Frame, Limits, Modified, Open,
    Performative, ProtocolHeader, Received, ReceiverSettleMode, Rejected, Role, SaslChallenge,
    SaslCode, SaslFrame, SaslInit, SaslMechanisms, SaslOutcome, SaslResponse, SenderSettleMode,
    Source, Symbol, Target, TerminusDurability, TransactionalState, Transfer, Value, WireError,
};

/// Encodes `frame` after the header of its layer, decodes it back, and checks equality.
fn frame_round_trip(frame: Frame) {
    let header = match frame {
        Frame::Sasl(_) => ProtocolHeader::SASL,
        _ => ProtocolHeader::AMQP,
    };
    let mut wire = header.to_bytes().to_vec();
    wire.extend(frame_bytes(&frame));
    let decoded = decode_all(&mut Codec::new(Limits::default()), &wire);
    assert_eq!(decoded.len(), 2);
    assert_eq!(decoded[1].0, Decoded::Frame(frame));
}

fn amqp(performative: impl Into<Performative>) -> Frame {
    Frame::Amqp(AmqpFrame::new(7, performative))
}

fn symbols(names: &[&str]) -> Option<Vec<Symbol>> {
    Some(names.iter().map(|&n| Symbol::from(n)).collect())
}

fn fields() -> Fields {
    let mut fields = Fields::default();
    fields.insert("product", "ferromq");
    fields.insert("x-count", Value::Int(3));
    fields
}

fn error() -> AmqpError {
    AmqpError { info: Some(fields()), ..AmqpError::new(condition::NOT_FOUND, "no such queue") }
}

fn full_source() -> Source {
    Source {
        address: Some("queue://orders".into()),
        durable: Some(TerminusDurability::UnsettledState),
        expiry_policy: Some(ExpiryPolicy::Never),
        timeout: Some(30),
        dynamic: Some(false),
        dynamic_node_properties: Some(fields()),
        distribution_mode: Some("copy".into()),
        filter: Some(Value::Map(vec![(
            Value::Symbol("jms-selector".into()),
            Value::described(Descriptor::Code(0x0000_468c_0000_0004), Value::from("color = 'red'")),
        )])),
        default_outcome: Some(DeliveryState::Modified(Modified {
            delivery_failed: Some(true),
            undeliverable_here: None,
            message_annotations: None,
        })),
        outcomes: symbols(&["amqp:accepted:list", "amqp:rejected:list"]),
        capabilities: symbols(&["queue"]),
    }
}

#[test]
fn every_performative_round_trips_with_every_field_set() {
    frame_round_trip(amqp(Open {
        container_id: "c1".into(),
        hostname: Some("localhost".into()),
        max_frame_size: Some(65_536),
        channel_max: Some(255),
        idle_time_out: Some(30_000),
        outgoing_locales: symbols(&["en-US"]),
        incoming_locales: symbols(&["en-US", "de"]),
        offered_capabilities: symbols(&["ANONYMOUS-RELAY"]),
        desired_capabilities: symbols(&["DELAYED_DELIVERY"]),
        properties: Some(fields()),
    }));
    frame_round_trip(amqp(Begin {
        remote_channel: Some(3),
        next_outgoing_id: 1,
        incoming_window: 2048,
        outgoing_window: u32::MAX,
        handle_max: Some(1023),
        offered_capabilities: symbols(&["a"]),
        desired_capabilities: symbols(&["b"]),
        properties: Some(fields()),
    }));
    frame_round_trip(amqp(Attach {
        snd_settle_mode: Some(SenderSettleMode::Settled),
        rcv_settle_mode: Some(ReceiverSettleMode::Second),
        source: Some(full_source()),
        target: Some(AttachTarget::Node(Target {
            address: Some("topic://prices".into()),
            durable: Some(TerminusDurability::Configuration),
            expiry_policy: Some(ExpiryPolicy::LinkDetach),
            timeout: Some(0),
            dynamic: Some(true),
            dynamic_node_properties: Some(fields()),
            capabilities: symbols(&["topic"]),
        })),
        unsettled: Some(Value::Map(vec![(
            Value::Binary(Bytes::from_static(b"tag")),
            DeliveryState::Accepted.to_value(),
        )])),
        incomplete_unsettled: Some(false),
        initial_delivery_count: Some(0),
        max_message_size: Some(1 << 30),
        offered_capabilities: symbols(&["x"]),
        desired_capabilities: symbols(&["y"]),
        properties: Some(fields()),
        ..Attach::new("link-1", 4, Role::Receiver)
    }));
    frame_round_trip(amqp(Flow {
        next_incoming_id: Some(10),
        incoming_window: 100,
        next_outgoing_id: 20,
        outgoing_window: 200,
        handle: Some(4),
        delivery_count: Some(5),
        link_credit: Some(1000),
        available: Some(0),
        drain: Some(true),
        echo: Some(false),
        properties: Some(fields()),
    }));
    frame_round_trip(Frame::Amqp(AmqpFrame::transfer(
        7,
        Transfer {
            handle: 4,
            delivery_id: Some(u32::MAX),
            delivery_tag: Some(Bytes::from_static(&[0, 0, 0, 1])),
            message_format: Some(0),
            settled: Some(false),
            more: Some(true),
            rcv_settle_mode: Some(ReceiverSettleMode::First),
            state: Some(DeliveryState::Received(Received {
                section_number: 2,
                section_offset: 300,
            })),
            resume: Some(false),
            aborted: Some(false),
            batchable: Some(true),
        },
        Bytes::from_static(b"\x00\x53\x77\xa1\x02hi"),
    )));
    frame_round_trip(amqp(Disposition {
        role: Role::Receiver,
        first: 1,
        last: Some(9),
        settled: Some(true),
        state: Some(DeliveryState::Rejected(Rejected { error: Some(error()) })),
        batchable: Some(false),
    }));
    frame_round_trip(amqp(Detach { handle: 4, closed: Some(true), error: Some(error()) }));
    frame_round_trip(amqp(End { error: Some(error()) }));
    frame_round_trip(amqp(Close { error: Some(error()) }));
}

#[test]
fn minimal_performatives_round_trip_and_apply_defaults() {
    let open = Open { container_id: "c".into(), ..Open::default() };
    assert_eq!(open.max_frame_size(), u32::MAX);
    assert_eq!(open.channel_max(), u16::MAX);
    frame_round_trip(amqp(open));
    frame_round_trip(amqp(Begin::default()));
    let attach = Attach::new("l", 0, Role::Sender);
    assert_eq!(attach.snd_settle_mode(), SenderSettleMode::Mixed);
    assert_eq!(attach.rcv_settle_mode(), ReceiverSettleMode::First);
    frame_round_trip(amqp(attach));
    frame_round_trip(amqp(Flow::default()));
    frame_round_trip(amqp(Transfer::default()));
    let disposition = Disposition {
        role: Role::Sender,
        first: 5,
        last: None,
        settled: None,
        state: None,
        batchable: None,
    };
    assert_eq!(disposition.last(), 5);
    assert!(!disposition.settled());
    frame_round_trip(amqp(disposition));
    frame_round_trip(amqp(Detach::default()));
    frame_round_trip(amqp(End::default()));
    frame_round_trip(amqp(Close::default()));
    frame_round_trip(Frame::Heartbeat);
}

#[test]
fn every_delivery_state_round_trips() {
    let txn_id = Bytes::from_static(b"txn-1");
    let states = [
        DeliveryState::Received(Received { section_number: 0, section_offset: 0 }),
        DeliveryState::Accepted,
        DeliveryState::Rejected(Rejected::default()),
        DeliveryState::Rejected(Rejected { error: Some(error()) }),
        DeliveryState::Released,
        DeliveryState::Modified(Modified::default()),
        DeliveryState::Modified(Modified {
            delivery_failed: Some(true),
            undeliverable_here: Some(true),
            message_annotations: Some(Annotations(vec![
                (Value::Symbol("x-opt-reason".into()), Value::from("poison")),
                (Value::Ulong(42), Value::Null),
            ])),
        }),
        DeliveryState::Declared(Declared { txn_id: txn_id.clone() }),
        DeliveryState::Transactional(TransactionalState { txn_id: txn_id.clone(), outcome: None }),
        DeliveryState::Transactional(TransactionalState {
            txn_id,
            outcome: Some(Box::new(DeliveryState::Accepted)),
        }),
    ];
    for state in states {
        let value = state.to_value();
        assert_eq!(DeliveryState::from_value(value.clone()), Ok(state.clone()));
        frame_round_trip(amqp(Disposition {
            role: Role::Receiver,
            first: 0,
            last: None,
            settled: Some(true),
            state: Some(state),
            batchable: None,
        }));
    }
    assert!(DeliveryState::Accepted.is_outcome());
    assert!(!DeliveryState::Received(Received::default()).is_outcome());
}

#[test]
fn outcomes_encode_as_the_spec_lays_them_out() {
    let encoded = |state: DeliveryState| {
        let mut dst = BytesMut::new();
        crate::amqp::encode_value(&state.to_value(), &mut dst).unwrap();
        dst.to_vec()
    };
    assert_eq!(encoded(DeliveryState::Accepted), [0x00, 0x53, 0x24, 0x45]);
    assert_eq!(encoded(DeliveryState::Released), [0x00, 0x53, 0x26, 0x45]);
    assert_eq!(
        encoded(DeliveryState::Modified(Modified {
            delivery_failed: Some(true),
            undeliverable_here: Some(true),
            message_annotations: None,
        })),
        [0x00, 0x53, 0x27, 0xc0, 0x03, 0x02, 0x41, 0x41]
    );
}

#[test]
fn transactions_round_trip() {
    let coordinator = Coordinator { capabilities: symbols(&["amqp:local-transactions"]) };
    frame_round_trip(amqp(Attach {
        target: Some(AttachTarget::Coordinator(coordinator.clone())),
        source: Some(Source {
            outcomes: symbols(&["amqp:accepted:list", "amqp:rejected:list"]),
            ..Source::default()
        }),
        ..Attach::new("txn", 0, Role::Sender)
    }));
    assert_eq!(Coordinator::CODE, 0x30);
    for value in [
        Declare::default().to_value(),
        Declare { global_id: Some(Value::from("g")) }.to_value(),
        Discharge { txn_id: Bytes::from_static(b"1"), fail: Some(true) }.to_value(),
        Discharge { txn_id: Bytes::from_static(b"1"), fail: None }.to_value(),
    ] {
        let again = super::value_round_trip(&value);
        assert!(!again.is_empty());
    }
    let discharge = Discharge { txn_id: Bytes::from_static(b"1"), fail: Some(true) };
    assert_eq!(Discharge::from_value(discharge.to_value()), Ok(discharge.clone()));
    assert!(discharge.fail());
    assert_eq!(Declare::from_value(Declare::default().to_value()), Ok(Declare::default()));
    // declare is 0x31, discharge 0x32, declared 0x33, transactional-state 0x34.
    let codes = [Declare::CODE, Discharge::CODE, Declared::CODE, TransactionalState::CODE];
    assert_eq!(codes, [0x31, 0x32, 0x33, 0x34]);
}

#[test]
fn sasl_frames_round_trip() {
    frame_round_trip(Frame::Sasl(SaslFrame::Mechanisms(SaslMechanisms {
        mechanisms: vec!["PLAIN".into(), "ANONYMOUS".into()],
    })));
    frame_round_trip(Frame::Sasl(SaslFrame::Init(SaslInit {
        mechanism: "PLAIN".into(),
        initial_response: Some(plain_response("admin", "secret")),
        hostname: Some("broker".into()),
    })));
    frame_round_trip(Frame::Sasl(SaslFrame::Init(SaslInit {
        mechanism: "ANONYMOUS".into(),
        ..SaslInit::default()
    })));
    frame_round_trip(Frame::Sasl(SaslFrame::Challenge(SaslChallenge {
        challenge: Bytes::from_static(b"nonce"),
    })));
    frame_round_trip(Frame::Sasl(SaslFrame::Response(SaslResponse {
        response: Bytes::from_static(b"proof"),
    })));
    for code in [SaslCode::Ok, SaslCode::Auth, SaslCode::Sys, SaslCode::SysPerm, SaslCode::SysTemp]
    {
        frame_round_trip(Frame::Sasl(SaslFrame::Outcome(SaslOutcome {
            code,
            additional_data: Some(Bytes::from_static(b"welcome")),
        })));
    }
    let credentials = parse_plain(&plain_response("admin", "secret")).unwrap();
    assert_eq!((credentials.authcid.as_str(), credentials.password.as_str()), ("admin", "secret"));
}

#[test]
fn a_single_symbol_is_accepted_where_the_spec_says_multiple() {
    let source = Value::described(
        Descriptor::Code(0x28),
        Value::List(vec![
            Value::from("q"),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Symbol("queue".into()),
        ]),
    );
    let source = Source::from_value(source).unwrap();
    assert_eq!(source.capabilities, symbols(&["queue"]));
}

/// Decodes one AMQP frame whose body is `performative` (a raw value).
fn decode_performative(performative: Value) -> Result<Performative, WireError> {
    let mut body = BytesMut::new();
    crate::amqp::encode_value(&performative, &mut body).unwrap();
    let mut wire = BytesMut::from(&ProtocolHeader::AMQP.to_bytes()[..]);
    wire.extend_from_slice(&((body.len() + 8) as u32).to_be_bytes());
    wire.extend_from_slice(&[2, 0, 0, 0]);
    wire.extend_from_slice(&body);
    let mut codec = Codec::new(Limits::default());
    codec.decode(&mut wire)?;
    match codec.decode(&mut wire)? {
        Some(Decoded::Frame(Frame::Amqp(frame))) => Ok(frame.performative),
        other => panic!("{other:?}"),
    }
}

fn performative(code: u64, fields: Vec<Value>) -> Value {
    Value::described(Descriptor::Code(code), Value::List(fields))
}

#[test]
fn a_missing_or_null_mandatory_field_names_the_performative_and_field() {
    let cases = [
        (performative(0x10, vec![]), "open", "container-id"),
        (performative(0x11, vec![Value::Null, Value::Uint(0)]), "begin", "incoming-window"),
        (performative(0x12, vec![Value::from("l"), Value::Uint(0)]), "attach", "role"),
        (performative(0x12, vec![Value::Null]), "attach", "name"),
        (performative(0x13, vec![Value::Null, Value::Uint(1)]), "flow", "next-outgoing-id"),
        (performative(0x14, vec![Value::Null]), "transfer", "handle"),
        (performative(0x15, vec![Value::Boolean(true)]), "disposition", "first"),
        (performative(0x16, vec![]), "detach", "handle"),
    ];
    for (value, composite, field) in cases {
        let err = decode_performative(value).unwrap_err();
        assert_eq!(err, WireError::MissingField { composite, field });
        assert!(err.to_string().contains(&format!("{field} of AMQP {composite}")), "{err}");
    }
    // A nested composite's mandatory field: the error's condition.
    let close = performative(0x18, vec![performative(0x1d, vec![Value::Null])]);
    assert_eq!(
        decode_performative(close),
        Err(WireError::MissingField { composite: "error", field: "condition" })
    );
}

#[test]
fn a_field_of_the_wrong_type_names_the_field() {
    let attach =
        performative(0x12, vec![Value::from("l"), Value::from("zero"), Value::Boolean(true)]);
    let err = decode_performative(attach).unwrap_err();
    assert!(
        matches!(
            &err,
            WireError::InvalidField { composite: "attach", field: "handle", expected: "uint", .. }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("field handle of AMQP attach must be uint"), "{err}");
    let bad_mode = performative(
        0x12,
        vec![Value::from("l"), Value::Uint(0), Value::Boolean(true), Value::Ubyte(7)],
    );
    let err = decode_performative(bad_mode).unwrap_err();
    assert!(matches!(err, WireError::InvalidField { field: "snd-settle-mode", .. }), "{err:?}");
    let bad_target = performative(
        0x12,
        vec![
            Value::from("l"),
            Value::Uint(0),
            Value::Boolean(true),
            Value::Null,
            Value::Null,
            Value::Null,
            performative(0x28, vec![]),
        ],
    );
    let err = decode_performative(bad_target).unwrap_err();
    assert!(matches!(err, WireError::InvalidField { field: "target", .. }), "{err:?}");
}

#[test]
fn unknown_performatives_and_non_described_bodies_are_errors() {
    let err = decode_performative(performative(0x19, vec![])).unwrap_err();
    assert!(err.to_string().contains("0x00000000:0x00000019"), "{err}");
    let err = decode_performative(Value::List(vec![])).unwrap_err();
    assert!(err.to_string().contains("expected a performative"), "{err}");
    let err =
        decode_performative(Value::described(Descriptor::Code(0x10), Value::Null)).unwrap_err();
    assert!(err.to_string().contains("a list of fields"), "{err}");
}

#[test]
fn symbolic_descriptors_are_accepted() {
    let close = Value::described(
        Descriptor::Symbol("amqp:close:list".into()),
        Value::List(vec![Value::described(
            Descriptor::Symbol("amqp:error:list".into()),
            Value::List(vec![Value::Symbol(condition::CONNECTION_FORCED.into())]),
        )]),
    );
    let Performative::Close(close) = decode_performative(close).unwrap() else { panic!() };
    assert_eq!(close.error.unwrap().condition, condition::CONNECTION_FORCED);
}

#[test]
fn null_fields_mean_the_default_and_extra_fields_are_ignored() {
    // A flow with every optional field null, and two fields from a future version.
    let mut fields = vec![Value::Null, Value::Uint(1), Value::Uint(2), Value::Uint(3)];
    fields.extend(std::iter::repeat_n(Value::Null, 7));
    fields.push(Value::from("future"));
    fields.push(Value::Map(vec![]));
    let Performative::Flow(flow) = decode_performative(performative(0x13, fields)).unwrap() else {
        panic!()
    };
    assert_eq!(
        flow,
        Flow { incoming_window: 1, next_outgoing_id: 2, outgoing_window: 3, ..Flow::default() }
    );
    assert!(!flow.drain() && !flow.echo());
}

#[test]
fn trailing_absent_fields_are_left_out_when_encoding() {
    let transfer = Transfer { handle: 1, delivery_id: Some(0), ..Transfer::default() };
    let bytes = frame_bytes(&amqp(transfer));
    assert_eq!(&bytes[8..], &[0x00, 0x53, 0x14, 0xc0, 0x04, 0x02, 0x52, 0x01, 0x43]);
    // A null before a set field stays.
    let flow = Flow { handle: Some(1), ..Flow::default() };
    let bytes = frame_bytes(&amqp(flow));
    assert_eq!(
        &bytes[8..],
        &[0x00, 0x53, 0x13, 0xc0, 0x07, 0x05, 0x40, 0x43, 0x43, 0x43, 0x52, 0x01]
    );
}

#[test]
fn a_payload_after_a_performative_other_than_transfer_is_an_error() {
    let mut frame = frame_bytes(&amqp(End::default()));
    frame.extend_from_slice(b"junk");
    let size = frame.len() as u32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    let mut wire = BytesMut::from(&ProtocolHeader::AMQP.to_bytes()[..]);
    wire.extend_from_slice(&frame);
    let mut codec = Codec::new(Limits::default());
    codec.decode(&mut wire).unwrap();
    assert_eq!(codec.decode(&mut wire), Err(WireError::TrailingBytes { what: "end", count: 4 }));
}
