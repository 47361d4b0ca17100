//! The type system: every primitive round-trips, the encoder picks the compact forms at
//! their boundaries, and every encoding the spec allows decodes.

use bytes::Bytes;

use super::{decode, value_round_trip};
use crate::amqp::{Array, Descriptor, Kind, Symbol, Value};

/// `value` encodes to exactly `expected` and decodes back.
fn encodes_to(value: Value, expected: &[u8]) {
    assert_eq!(value_round_trip(&value), expected, "{value:?}");
}

#[test]
fn fixed_width_primitives_take_their_compact_forms_at_the_boundaries() {
    encodes_to(Value::Null, &[0x40]);
    encodes_to(Value::Boolean(true), &[0x41]);
    encodes_to(Value::Boolean(false), &[0x42]);
    encodes_to(Value::Ubyte(0xfe), &[0x50, 0xfe]);
    encodes_to(Value::Ushort(0x1234), &[0x60, 0x12, 0x34]);
    encodes_to(Value::Uint(0), &[0x43]);
    encodes_to(Value::Uint(1), &[0x52, 0x01]);
    encodes_to(Value::Uint(255), &[0x52, 0xff]);
    encodes_to(Value::Uint(256), &[0x70, 0, 0, 1, 0]);
    encodes_to(Value::Uint(u32::MAX), &[0x70, 0xff, 0xff, 0xff, 0xff]);
    encodes_to(Value::Ulong(0), &[0x44]);
    encodes_to(Value::Ulong(255), &[0x53, 0xff]);
    encodes_to(Value::Ulong(256), &[0x80, 0, 0, 0, 0, 0, 0, 1, 0]);
    encodes_to(Value::Ulong(u64::MAX), &[0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    encodes_to(Value::Byte(-1), &[0x51, 0xff]);
    encodes_to(Value::Short(-2), &[0x61, 0xff, 0xfe]);
    encodes_to(Value::Int(127), &[0x54, 0x7f]);
    encodes_to(Value::Int(-128), &[0x54, 0x80]);
    encodes_to(Value::Int(128), &[0x71, 0, 0, 0, 0x80]);
    encodes_to(Value::Int(-129), &[0x71, 0xff, 0xff, 0xff, 0x7f]);
    encodes_to(Value::Int(i32::MIN), &[0x71, 0x80, 0, 0, 0]);
    encodes_to(Value::Long(-128), &[0x55, 0x80]);
    encodes_to(Value::Long(127), &[0x55, 0x7f]);
    encodes_to(Value::Long(128), &[0x81, 0, 0, 0, 0, 0, 0, 0, 0x80]);
    encodes_to(Value::Long(i64::MIN), &[0x81, 0x80, 0, 0, 0, 0, 0, 0, 0]);
    encodes_to(Value::Float(1.5), &[0x72, 0x3f, 0xc0, 0, 0]);
    encodes_to(Value::Double(0.5), &[0x82, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0]);
    encodes_to(Value::Decimal32([1, 2, 3, 4]), &[0x74, 1, 2, 3, 4]);
    encodes_to(Value::Decimal64([1; 8]), &[0x84, 1, 1, 1, 1, 1, 1, 1, 1]);
    let mut decimal128 = vec![0x94];
    decimal128.extend_from_slice(&[7; 16]);
    encodes_to(Value::Decimal128([7; 16]), &decimal128);
    encodes_to(Value::Char('é'), &[0x73, 0, 0, 0, 0xe9]);
    encodes_to(Value::Char('😀'), &[0x73, 0, 0x01, 0xf6, 0x00]);
    encodes_to(Value::Timestamp(0x0102_0304_0506_0708), &[0x83, 1, 2, 3, 4, 5, 6, 7, 8]);
    let mut uuid = vec![0x98];
    uuid.extend(0..16u8);
    let raw: [u8; 16] = std::array::from_fn(|i| i as u8);
    encodes_to(Value::Uuid(raw), &uuid);
}

#[test]
fn the_wide_forms_of_small_values_decode_too() {
    // Peers need not compact: every encoding of a value decodes to the same value.
    assert_eq!(decode(&[0x56, 0x01]), Ok(Value::Boolean(true)));
    assert_eq!(decode(&[0x56, 0x00]), Ok(Value::Boolean(false)));
    assert_eq!(decode(&[0x70, 0, 0, 0, 0]), Ok(Value::Uint(0)));
    assert_eq!(decode(&[0x52, 0]), Ok(Value::Uint(0)));
    assert_eq!(decode(&[0x80, 0, 0, 0, 0, 0, 0, 0, 7]), Ok(Value::Ulong(7)));
    assert_eq!(decode(&[0x71, 0, 0, 0, 5]), Ok(Value::Int(5)));
    assert_eq!(
        decode(&[0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        Ok(Value::Long(-1))
    );
    assert_eq!(decode(&[0xb1, 0, 0, 0, 2, b'h', b'i']), Ok(Value::from("hi")));
    assert_eq!(decode(&[0xb3, 0, 0, 0, 1, b'x']), Ok(Value::Symbol("x".into())));
    assert_eq!(decode(&[0xb0, 0, 0, 0, 1, 9]), Ok(Value::Binary(Bytes::from_static(&[9]))));
    assert_eq!(decode(&[0xc0, 0x01, 0x00]), Ok(Value::List(vec![])));
    assert_eq!(decode(&[0xd0, 0, 0, 0, 4, 0, 0, 0, 0]), Ok(Value::List(vec![])));
    assert_eq!(decode(&[0xd1, 0, 0, 0, 4, 0, 0, 0, 0]), Ok(Value::Map(vec![])));
    assert_eq!(
        decode(&[0xd0, 0, 0, 0, 6, 0, 0, 0, 2, 0x41, 0x43]),
        Ok(Value::List(vec![Value::Boolean(true), Value::Uint(0)]))
    );
}

#[test]
fn variable_width_values_switch_to_32_bit_sizes_above_255_bytes() {
    encodes_to(Value::Binary(Bytes::new()), &[0xa0, 0]);
    encodes_to(Value::from("hi"), &[0xa1, 2, b'h', b'i']);
    encodes_to(Value::Symbol("PLAIN".into()), &[0xa3, 5, b'P', b'L', b'A', b'I', b'N']);
    for (len, code) in [(255, 0xa1), (256, 0xb1)] {
        let bytes = value_round_trip(&Value::String("x".repeat(len)));
        assert_eq!(bytes[0], code, "{len}");
        assert_eq!(bytes.len(), len + if code == 0xa1 { 2 } else { 5 });
    }
    for (len, code) in [(255, 0xa0), (256, 0xb0), (70_000, 0xb0)] {
        let bytes = value_round_trip(&Value::Binary(Bytes::from(vec![7; len])));
        assert_eq!(bytes[0], code, "{len}");
    }
    let bytes = value_round_trip(&Value::Symbol(Symbol("s".repeat(300))));
    assert_eq!(&bytes[..5], &[0xb3, 0, 0, 0x01, 0x2c]);
    let bytes = value_round_trip(&Value::String("é".repeat(200)));
    assert_eq!(bytes[0], 0xb1, "400 UTF-8 bytes");
}

#[test]
fn lists_and_maps_take_list0_8_and_32_forms() {
    encodes_to(Value::List(vec![]), &[0x45]);
    encodes_to(
        Value::List(vec![Value::Uint(1), Value::Null]),
        &[0xc0, 0x04, 0x02, 0x52, 0x01, 0x40],
    );
    encodes_to(Value::Map(vec![]), &[0xc1, 0x01, 0x00]);
    encodes_to(
        Value::Map(vec![(Value::Symbol("k".into()), Value::Boolean(true))]),
        &[0xc1, 0x05, 0x02, 0xa3, 0x01, b'k', 0x41],
    );
    // 254 content bytes + the count fit list8's size byte; 255 do not.
    let list8 = Value::List(vec![Value::Binary(Bytes::from(vec![0; 252]))]);
    let bytes = value_round_trip(&list8);
    assert_eq!(&bytes[..3], &[0xc0, 0xff, 0x01]);
    let list32 = Value::List(vec![Value::Binary(Bytes::from(vec![0; 253]))]);
    let bytes = value_round_trip(&list32);
    assert_eq!(&bytes[..9], &[0xd0, 0, 0, 1, 3, 0, 0, 0, 1]);
    // More than 255 elements need list32 even when small.
    let many = Value::List(vec![Value::Null; 256]);
    assert_eq!(value_round_trip(&many)[0], 0xd0);
    let big_map = Value::Map((0..200).map(|i| (Value::Int(i), Value::Null)).collect());
    assert_eq!(value_round_trip(&big_map)[0], 0xd1);
}

#[test]
fn maps_keep_wire_order_and_any_key_type() {
    let map = Value::Map(vec![
        (Value::from("z"), Value::Int(1)),
        (Value::Ulong(3), Value::List(vec![Value::Null])),
        (Value::Double(1.5), Value::Map(vec![])),
        (Value::from("a"), Value::Binary(Bytes::from_static(b"\0\x01"))),
    ]);
    value_round_trip(&map);
}

#[test]
fn arrays_of_every_kind_round_trip() {
    let arrays = [
        Array::new(Kind::Null, vec![]),
        Array::new(Kind::Boolean, vec![Value::Boolean(true), Value::Boolean(false)]),
        Array::new(Kind::Ubyte, vec![Value::Ubyte(1)]),
        Array::new(Kind::Ushort, vec![Value::Ushort(1)]),
        Array::new(Kind::Uint, vec![Value::Uint(0), Value::Uint(70_000)]),
        Array::new(Kind::Ulong, vec![Value::Ulong(0), Value::Ulong(u64::MAX)]),
        Array::new(Kind::Byte, vec![Value::Byte(-1)]),
        Array::new(Kind::Short, vec![Value::Short(-1)]),
        Array::new(Kind::Int, vec![Value::Int(-1), Value::Int(1 << 20)]),
        Array::new(Kind::Long, vec![Value::Long(-1)]),
        Array::new(Kind::Float, vec![Value::Float(0.25)]),
        Array::new(Kind::Double, vec![Value::Double(0.25)]),
        Array::new(Kind::Decimal32, vec![Value::Decimal32([1; 4])]),
        Array::new(Kind::Decimal64, vec![Value::Decimal64([1; 8])]),
        Array::new(Kind::Decimal128, vec![Value::Decimal128([1; 16])]),
        Array::new(Kind::Char, vec![Value::Char('a')]),
        Array::new(Kind::Timestamp, vec![Value::Timestamp(-5)]),
        Array::new(Kind::Uuid, vec![Value::Uuid([3; 16])]),
        Array::new(Kind::Binary, vec![Value::Binary(Bytes::from(vec![1; 300]))]),
        Array::new(Kind::String, vec![Value::from("a"), Value::from("bc")]),
        Array::of_symbols(["ANONYMOUS", "PLAIN"]),
        Array::new(Kind::List, vec![Value::List(vec![Value::Null]), Value::List(vec![])]),
        Array::new(Kind::Map, vec![Value::Map(vec![(Value::Null, Value::Null)])]),
        Array::new(Kind::Array, vec![Value::Array(Array::of_symbols(["x"]))]),
        Array::new(Kind::Symbol, vec![]),
    ];
    for array in arrays {
        value_round_trip(&Value::Array(array));
    }
}

#[test]
fn symbol_arrays_are_array8_of_sym8() {
    encodes_to(
        Value::Array(Array::of_symbols(["a", "bc"])),
        &[0xe0, 0x07, 0x02, 0xa3, 0x01, b'a', 0x02, b'b', b'c'],
    );
    // RabbitMQ's sym32 elements decode to the same array.
    assert_eq!(
        decode(&[0xe0, 0x0b, 0x02, 0xb3, 0, 0, 0, 1, b'a', 0, 0, 0, 0]),
        Ok(Value::Array(Array::of_symbols(["a", ""])))
    );
    // An empty array still names its element type.
    encodes_to(Value::Array(Array::new(Kind::Symbol, vec![])), &[0xe0, 0x02, 0x00, 0xa3]);
}

#[test]
fn arrays_of_described_values_keep_one_descriptor() {
    let array = Array {
        descriptor: Some(Descriptor::Symbol("x:point".into())),
        kind: Kind::List,
        elements: vec![Value::List(vec![Value::Int(1)]), Value::List(vec![Value::Int(2)])],
    };
    let bytes = value_round_trip(&Value::Array(array));
    assert_eq!(&bytes[3..5], &[0x00, 0xa3], "the descriptor follows the count once");
    let coded = Array {
        descriptor: Some(Descriptor::Code(0x24)),
        kind: Kind::List,
        elements: vec![Value::List(vec![]); 3],
    };
    value_round_trip(&Value::Array(coded));
}

#[test]
fn array_elements_of_another_type_cannot_be_encoded() {
    let mixed = Value::Array(Array::new(Kind::Symbol, vec![Value::from("a string")]));
    let err = crate::amqp::types::encode_to_vec(&mixed).unwrap_err();
    assert!(err.to_string().contains("array element of type string"), "{err}");
}

#[test]
fn described_values_take_code_or_symbol_descriptors() {
    encodes_to(
        Value::described(Descriptor::Code(0x24), Value::List(vec![])),
        &[0x00, 0x53, 0x24, 0x45],
    );
    encodes_to(
        Value::described(Descriptor::Code(0x0000_468c_0000_0001), Value::Null),
        &[0x00, 0x80, 0, 0, 0x46, 0x8c, 0, 0, 0, 1, 0x40],
    );
    encodes_to(
        Value::described(Descriptor::Symbol("a:b".into()), Value::from("v")),
        &[0x00, 0xa3, 3, b'a', b':', b'b', 0xa1, 1, b'v'],
    );
    // Described values nest: a described value describing a described value.
    value_round_trip(&Value::described(
        Descriptor::Code(1),
        Value::described(Descriptor::Code(2), Value::Int(3)),
    ));
    // The descriptor may be written in any ulong form.
    assert_eq!(decode(&[0x00, 0x44, 0x40]), Ok(Value::described(Descriptor::Code(0), Value::Null)));
}

#[test]
fn nested_compounds_round_trip() {
    let mut value = Value::from("leaf");
    for depth in 0..20 {
        value = match depth % 3 {
            0 => Value::List(vec![value, Value::Uint(depth)]),
            1 => Value::Map(vec![(Value::Uint(depth), value)]),
            _ => Value::described(Descriptor::Code(u64::from(depth)), value),
        };
    }
    value_round_trip(&value);
}
