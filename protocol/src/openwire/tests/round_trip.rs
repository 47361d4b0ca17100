//! Every command, with every field set, survives encode and decode in tight and loose
//! encoding, with and without the cache, at every supported version.

use bytes::{Bytes, BytesMut};

use super::MAX_FRAME;
use crate::openwire::*;

fn connection_id() -> ConnectionId {
    ConnectionId { value: "ID:host-4242-1700000000000-1:1".into() }
}

fn consumer_id(value: i64) -> ConsumerId {
    ConsumerId { connection_id: connection_id().value, session_id: 1, value }
}

fn producer_id() -> ProducerId {
    ProducerId { connection_id: connection_id().value, value: 0x1234, session_id: 0x12345678 }
}

fn broker_id() -> BrokerId {
    BrokerId { value: "ID:broker-1".into() }
}

fn message_id(seq: i64) -> MessageId {
    MessageId {
        text_view: Some(format!("ID:host-4242-1700000000000-1:1:1:1:{seq}")),
        producer_id: Some(producer_id()),
        producer_sequence_id: seq,
        broker_sequence_id: i64::MAX,
    }
}

fn local_tx() -> TransactionId {
    TransactionId::Local(LocalTransactionId { value: 7, connection_id: Some(connection_id()) })
}

fn xa_tx() -> TransactionId {
    TransactionId::Xa(XaTransactionId {
        format_id: 131077,
        global_transaction_id: Some(Bytes::from_static(b"gtrid")),
        branch_qualifier: None,
    })
}

fn throwable(depth: usize) -> Throwable {
    Throwable {
        class_name: "javax.jms.InvalidDestinationException".into(),
        message: Some("no such queue: Ünïcode".into()),
        stack_trace: vec![StackTraceElement {
            class_name: Some("org.apache.activemq.Broker".into()),
            method_name: Some("send".into()),
            file_name: None,
            line_number: -1,
        }],
        cause: (depth > 0).then(|| Box::new(throwable(depth - 1))),
    }
}

fn message(body_type: MessageType) -> Message {
    let mut props = PrimitiveMap::new();
    props.insert("name", "value");
    props.insert("count", 3);
    let mut m = Message {
        command_id: 9,
        response_required: true,
        body_type,
        producer_id: Some(producer_id()),
        destination: Some(Destination::queue("FIXTURE.TEXT")),
        transaction_id: Some(local_tx()),
        original_destination: Some(Destination::topic("ORIGINAL")),
        message_id: Some(message_id(1)),
        original_transaction_id: Some(xa_tx()),
        group_id: Some("group".into()),
        group_sequence: 3,
        correlation_id: Some("corr-1".into()),
        persistent: true,
        expiration: 1_700_000_000_000,
        priority: 4,
        reply_to: Some(Destination {
            kind: DestinationKind::TempQueue,
            physical_name: "ID:tmp:1".into(),
        }),
        timestamp: -5,
        jms_type: Some("greeting".into()),
        content: None,
        marshalled_properties: Some(props.to_bytes().unwrap()),
        data_structure: Some(Box::new(DataStructure::ConsumerId(consumer_id(9)))),
        target_consumer_id: Some(consumer_id(1)),
        compressed: false,
        redelivery_counter: 2,
        broker_path: Some(vec![broker_id()]),
        arrival: 65_535,
        user_id: Some("user".into()),
        received_by_df_bridge: true,
        droppable: true,
        cluster: Some(vec![broker_id(), BrokerId { value: "other".into() }]),
        broker_in_time: 1,
        broker_out_time: 2,
        jmsx_group_first_for_consumer: true,
        blob: None,
    };
    if body_type == MessageType::Blob {
        m.blob = Some(BlobInfo {
            remote_blob_url: Some("http://x/blob".into()),
            mime_type: None,
            deleted_by_broker: true,
        });
    } else {
        m.set_uncompressed_content(Some(Bytes::from_static(b"\0\0\0\x02hi")), true).unwrap();
    }
    m
}

/// One of every command, every field set to something other than its default.
fn samples() -> Vec<Command> {
    let consumer = ConsumerInfo {
        command_id: 5,
        response_required: true,
        consumer_id: Some(consumer_id(1)),
        browser: true,
        destination: Some(Destination::queue("Q")),
        prefetch_size: 1000,
        maximum_pending_message_limit: -1,
        dispatch_async: true,
        selector: Some("n >= 1".into()),
        client_id: Some("fixture-client".into()),
        subscription_name: Some("fixture-sub".into()),
        no_local: true,
        exclusive: true,
        retroactive: true,
        priority: -3,
        broker_path: Some(vec![broker_id()]),
        additional_predicate: Some(Box::new(DataStructure::NetworkBridgeFilter(
            NetworkBridgeFilter {
                network_broker_id: Some(broker_id()),
                message_ttl: 3,
                consumer_ttl: 0,
            },
        ))),
        network_subscription: true,
        optimized_acknowledge: true,
        no_range_acks: true,
        network_consumer_path: Some(vec![consumer_id(2), consumer_id(3)]),
    };
    let broker = BrokerInfo {
        command_id: 1,
        response_required: false,
        broker_id: Some(broker_id()),
        broker_url: Some("tcp://localhost:61616".into()),
        peer_broker_infos: Some(vec![BrokerInfo {
            broker_name: Some("peer".into()),
            ..BrokerInfo::default()
        }]),
        broker_name: Some("localhost".into()),
        slave_broker: true,
        master_broker: true,
        fault_tolerant_configuration: true,
        duplex_connection: true,
        network_connection: true,
        connection_id: 0x1_0000_0000,
        broker_upload_url: Some("http://upload".into()),
        network_properties: Some("a=b".into()),
    };
    vec![
        WireFormatInfo::announcing(&WireFormat::default(), "ferromq", "0.1").into(),
        broker.into(),
        ConnectionInfo {
            command_id: 1,
            response_required: true,
            connection_id: Some(connection_id()),
            client_id: Some("client".into()),
            password: Some("pw".into()),
            user_name: Some("user".into()),
            broker_path: Some(vec![]),
            broker_master_connector: true,
            manageable: true,
            client_master: true,
            fault_tolerant: true,
            failover_reconnect: true,
            client_ip: Some("tcp://127.0.0.1:5000".into()),
        }
        .into(),
        SessionInfo {
            command_id: 2,
            response_required: true,
            session_id: Some(SessionId { connection_id: connection_id().value, value: 1 }),
        }
        .into(),
        consumer.clone().into(),
        ProducerInfo {
            command_id: 6,
            response_required: true,
            producer_id: Some(producer_id()),
            destination: None,
            broker_path: None,
            dispatch_async: true,
            window_size: 1 << 20,
        }
        .into(),
        TransactionInfo {
            command_id: 7,
            response_required: true,
            connection_id: Some(connection_id()),
            transaction_id: Some(local_tx()),
            transaction_type: transaction_type::COMMIT_ONE_PHASE,
        }
        .into(),
        TransactionInfo {
            command_id: 8,
            response_required: true,
            connection_id: Some(connection_id()),
            transaction_id: Some(xa_tx()),
            transaction_type: transaction_type::PREPARE,
        }
        .into(),
        DestinationInfo {
            command_id: 8,
            response_required: true,
            connection_id: Some(connection_id()),
            destination: Some(Destination {
                kind: DestinationKind::TempTopic,
                physical_name: "ID:tmp-topic".into(),
            }),
            operation_type: destination_operation::REMOVE,
            timeout: 0,
            broker_path: None,
        }
        .into(),
        RemoveSubscriptionInfo {
            command_id: 9,
            response_required: true,
            connection_id: Some(connection_id()),
            subscription_name: Some("fixture-sub".into()),
            client_id: Some("fixture-client".into()),
        }
        .into(),
        KeepAliveInfo { command_id: 0, response_required: true }.into(),
        ShutdownInfo { command_id: 10, response_required: false }.into(),
        RemoveInfo {
            command_id: 11,
            response_required: true,
            object_id: Some(Box::new(DataStructure::ConsumerId(consumer_id(1)))),
            last_delivered_sequence_id: -2,
        }
        .into(),
        ControlCommand { command_id: 12, response_required: false, command: Some("x".into()) }
            .into(),
        FlushCommand { command_id: 13, response_required: false }.into(),
        ConnectionError {
            command_id: 14,
            response_required: false,
            exception: Some(throwable(2)),
            connection_id: Some(connection_id()),
        }
        .into(),
        ConsumerControl {
            command_id: 15,
            response_required: false,
            destination: Some(Destination::queue("Q")),
            close: true,
            consumer_id: Some(consumer_id(1)),
            prefetch: 10,
            flush: true,
            start: true,
            stop: true,
        }
        .into(),
        ConnectionControl {
            command_id: 16,
            response_required: false,
            close: true,
            exit: true,
            fault_tolerant: true,
            resume: true,
            suspend: true,
            connected_brokers: Some("tcp://a,tcp://b".into()),
            reconnect_to: Some("tcp://b".into()),
            rebalance_connection: true,
            token: Some(Bytes::from_static(&[1, 2, 3])),
        }
        .into(),
        ProducerAck {
            command_id: 17,
            response_required: false,
            producer_id: Some(producer_id()),
            size: 1024,
        }
        .into(),
        MessagePull {
            command_id: 18,
            response_required: false,
            consumer_id: Some(consumer_id(1)),
            destination: Some(Destination::queue("Q")),
            timeout: -1,
            correlation_id: Some("pull".into()),
            message_id: Some(message_id(3)),
        }
        .into(),
        MessageDispatch {
            command_id: 19,
            response_required: false,
            consumer_id: Some(consumer_id(1)),
            destination: Some(Destination::queue("FIXTURE.TEXT")),
            message: Some(Box::new(message(MessageType::Text))),
            redelivery_counter: 1,
        }
        .into(),
        MessageDispatch { command_id: 20, ..MessageDispatch::default() }.into(),
        MessageAck {
            command_id: 21,
            response_required: true,
            destination: Some(Destination::queue("Q")),
            transaction_id: Some(local_tx()),
            consumer_id: Some(consumer_id(1)),
            ack_type: ack_type::POISON,
            first_message_id: Some(message_id(1)),
            last_message_id: Some(message_id(2)),
            message_count: 2,
            poison_cause: Some(throwable(0)),
        }
        .into(),
        Response { command_id: 22, response_required: false, correlation_id: 5 }.into(),
        ExceptionResponse {
            command_id: 23,
            response_required: false,
            correlation_id: 6,
            exception: Some(throwable(1)),
        }
        .into(),
        DataResponse {
            command_id: 24,
            response_required: false,
            correlation_id: 7,
            data: Some(Box::new(DataStructure::SubscriptionInfo(SubscriptionInfo {
                client_id: Some("c".into()),
                destination: Some(Destination::topic("T")),
                selector: None,
                subscription_name: Some("s".into()),
                subscribed_destination: Some(Destination::topic("T")),
                no_local: true,
            }))),
        }
        .into(),
        DataArrayResponse {
            command_id: 25,
            response_required: false,
            correlation_id: 8,
            data: Some(vec![
                DataStructure::DiscoveryEvent(DiscoveryEvent {
                    service_name: Some("svc".into()),
                    broker_name: None,
                }),
                DataStructure::Destination(Destination::queue("Q")),
            ]),
        }
        .into(),
        IntegerResponse { command_id: 26, response_required: false, correlation_id: 9, result: -1 }
            .into(),
        MessageDispatchNotification {
            command_id: 27,
            response_required: false,
            consumer_id: Some(consumer_id(1)),
            destination: Some(Destination::queue("Q")),
            delivery_sequence_id: 99,
            message_id: Some(message_id(4)),
        }
        .into(),
        BrokerSubscriptionInfo {
            command_id: 28,
            response_required: false,
            broker_id: Some(broker_id()),
            broker_name: Some("b".into()),
            subscription_infos: Some(vec![consumer]),
        }
        .into(),
        ReplayCommand {
            command_id: 29,
            response_required: false,
            first_nak_number: 1,
            last_nak_number: 2,
        }
        .into(),
        Command::Message(Box::new(message(MessageType::Message))),
        Command::Message(Box::new(message(MessageType::Bytes))),
        Command::Message(Box::new(message(MessageType::Map))),
        Command::Message(Box::new(message(MessageType::Object))),
        Command::Message(Box::new(message(MessageType::Stream))),
        Command::Message(Box::new(message(MessageType::Text))),
        Command::Message(Box::new(message(MessageType::Blob))),
    ]
}

/// The formats to test: both encodings, cache on and off, with and without size prefix,
/// at every supported version.
fn formats() -> Vec<WireFormat> {
    let mut out = Vec::new();
    for version in [12, 11, 10, 9, 1] {
        for (tight, cache, size_prefix_disabled) in
            [(true, true, false), (true, false, false), (false, true, false), (false, false, true)]
        {
            out.push(WireFormat {
                version,
                tight_encoding: tight,
                cache_enabled: cache,
                size_prefix_disabled,
                ..WireFormat::default()
            });
        }
    }
    out
}

fn in_version(command: &Command, version: u32) -> bool {
    match command.data_type() {
        92 => version >= 12,
        19 | 20 | 29 => version >= 9,
        _ => true,
    }
}

#[test]
fn every_command_round_trips_in_every_format() {
    for format in formats() {
        let mut sender = Codec::with_format(MAX_FRAME, format);
        let mut receiver = Codec::with_format(MAX_FRAME, format);
        let mut echo = Codec::with_format(MAX_FRAME, format);
        // Twice, so that the second round uses cache hits.
        for round in 0..2 {
            for command in samples().iter().filter(|c| in_version(c, format.version)) {
                let mut wire = BytesMut::new();
                sender.encode(command, &mut wire).unwrap_or_else(|e| panic!("{format:?}: {e}"));
                let sent = wire.clone();
                let decoded = receiver
                    .decode(&mut wire)
                    .unwrap_or_else(|e| panic!("{format:?} {command:?}: {e}"))
                    .expect("a whole frame");
                assert!(wire.is_empty());
                if format.version == 12 {
                    assert_eq!(&decoded, command, "{format:?} round {round}");
                }
                // Fields an older version lacks are dropped, but what remains is stable.
                let again = echo.encode_to_bytes(&decoded).unwrap();
                assert_eq!(&again[..], &sent[..], "{format:?} round {round}: {command:?}");
            }
        }
    }
}

#[test]
fn the_second_send_of_an_id_is_a_cache_reference() {
    let format = WireFormat::default();
    let mut codec = Codec::with_format(MAX_FRAME, format);
    let info = SessionInfo {
        command_id: 1,
        response_required: false,
        session_id: Some(SessionId { connection_id: "ID:x".into(), value: 1 }),
    };
    let first = codec.encode_to_bytes(&info.clone().into()).unwrap();
    let second = codec.encode_to_bytes(&info.into()).unwrap();
    assert!(second.len() < first.len());
    // Size, type, one byte of booleans, command id, slot 0.
    assert_eq!(&second[..], &[0, 0, 0, 9, 4, 1, 0, 0, 0, 0, 1, 0, 0]);
}

#[test]
fn fields_newer_than_the_version_are_not_sent() {
    let consumer = || match &samples()[4] {
        Command::ConsumerInfo(c) => (**c).clone(),
        other => panic!("{other:?}"),
    };
    let at = |version| {
        let format = WireFormat { version, ..WireFormat::default() };
        let mut a = Codec::with_format(MAX_FRAME, format);
        let mut b = Codec::with_format(MAX_FRAME, format);
        let mut wire = BytesMut::from(&a.encode_to_bytes(&consumer().into()).unwrap()[..]);
        match b.decode(&mut wire).unwrap() {
            Some(Command::ConsumerInfo(c)) => *c,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(at(10).client_id.as_deref(), Some("fixture-client"));
    assert_eq!(at(9).client_id, None);
    assert!(at(9).network_consumer_path.is_some());
    assert_eq!(at(1).network_consumer_path, None);
    assert_eq!(at(9).additional_predicate, at(12).additional_predicate);
}

#[test]
fn types_newer_than_the_version_are_refused() {
    let format = WireFormat { version: 1, ..WireFormat::default() };
    let mut codec = Codec::with_format(MAX_FRAME, format);
    let pull: Command = MessagePull::default().into();
    assert_eq!(
        codec.encode(&pull, &mut BytesMut::new()),
        Err(WireError::TypeNotInVersion { data_type: 20, version: 1 })
    );
    let mut wire = BytesMut::from(&[0u8, 0, 0, 2, 20, 0][..]);
    assert!(matches!(codec.decode(&mut wire), Err(WireError::TypeNotInVersion { .. })));
}

#[test]
fn stack_traces_travel_only_when_enabled() {
    let response = |format| {
        let mut a = Codec::with_format(MAX_FRAME, format);
        let mut b = Codec::with_format(MAX_FRAME, format);
        let sent: Command = ExceptionResponse {
            correlation_id: 1,
            exception: Some(throwable(1)),
            ..ExceptionResponse::default()
        }
        .into();
        let mut wire = BytesMut::from(&a.encode_to_bytes(&sent).unwrap()[..]);
        match b.decode(&mut wire).unwrap() {
            Some(Command::ExceptionResponse(r)) => r.exception.unwrap(),
            other => panic!("{other:?}"),
        }
    };
    let with = response(WireFormat::default());
    assert_eq!(with, throwable(1));
    let without = response(WireFormat { stack_trace_enabled: false, ..WireFormat::default() });
    assert_eq!(without.class_name, "javax.jms.InvalidDestinationException");
    assert_eq!(without.message.as_deref(), Some("no such queue: Ünïcode"));
    assert!(without.stack_trace.is_empty() && without.cause.is_none());
}

#[test]
fn strings_use_the_ascii_form_only_for_plain_ascii() {
    let mut codec = Codec::with_format(MAX_FRAME, WireFormat::default());
    let with = |codec: &mut Codec, text: &str| {
        let c: Command = ControlCommand { command: Some(text.into()), ..Default::default() }.into();
        let bytes = codec.encode_to_bytes(&c).unwrap();
        let mut wire = BytesMut::from(&bytes[..]);
        let Some(Command::ControlCommand(back)) = codec.decode(&mut wire).unwrap() else {
            panic!()
        };
        assert_eq!(back.command.as_deref(), Some(text));
        bytes
    };
    // ASCII: bits "present", "ascii"; then length 3 and the bytes.
    assert_eq!(&with(&mut codec, "abc")[5..], &[1, 0b110, 0, 0, 0, 0, 0, 3, b'a', b'b', b'c']);
    // NUL is not "ASCII" for Java: writeUTF with C0 80.
    assert_eq!(&with(&mut codec, "\0")[5..], &[1, 0b010, 0, 0, 0, 0, 0, 2, 0xC0, 0x80]);
    with(&mut codec, "\u{1F600} é");
}

#[test]
fn over_long_strings_are_refused_and_leave_the_cache_intact() {
    let mut codec = Codec::with_format(MAX_FRAME, WireFormat::default());
    let mut peer = Codec::with_format(MAX_FRAME, WireFormat::default());
    let session = |value| -> Command {
        SessionInfo {
            session_id: Some(SessionId { connection_id: "ID:c".into(), value }),
            ..SessionInfo::default()
        }
        .into()
    };
    let too_long: Command = ConnectionInfo {
        connection_id: Some(ConnectionId { value: "x".into() }),
        client_id: Some("é".repeat(20_000)),
        ..ConnectionInfo::default()
    }
    .into();
    assert!(matches!(
        codec.encode(&too_long, &mut BytesMut::new()),
        Err(WireError::StringTooLong { .. })
    ));
    // The failed command's cache entry for the connection id was rolled back: both sides
    // still agree on every slot.
    let mut wire = BytesMut::new();
    codec.encode(&session(1), &mut wire).unwrap();
    codec.encode(&session(1), &mut wire).unwrap();
    assert_eq!(peer.decode(&mut wire).unwrap(), Some(session(1)));
    assert_eq!(peer.decode(&mut wire).unwrap(), Some(session(1)));
    // Loose encoding allows up to 65535 bytes.
    let mut loose = Codec::with_format(MAX_FRAME, WireFormat::loose());
    loose.encode(&too_long, &mut BytesMut::new()).unwrap();
}

#[test]
fn nothing_but_wire_format_info_before_negotiation() {
    let mut codec = Codec::new(MAX_FRAME);
    let c: Command = KeepAliveInfo::default().into();
    assert_eq!(
        codec.encode(&c, &mut BytesMut::new()),
        Err(WireError::NotNegotiated { data_type: 10 })
    );
    let mut wire = BytesMut::from(&[0u8, 0, 0, 6, 10, 0, 0, 0, 0, 0][..]);
    assert_eq!(codec.decode(&mut wire), Err(WireError::NotNegotiated { data_type: 10 }));
}
