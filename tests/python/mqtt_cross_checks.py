#!/usr/bin/env python3
"""The MQTT (paho-mqtt), AMQP (Qpid Proton) and STOMP (stomp.py) halves of the cross-protocol
checks of tests/tests/integration/mqtt_cross.rs, whose other halves are the ActiveMQ JMS
client's (tests/java/MqttJmsChecks.java) or this script's own.

    mqtt_cross_checks.py --port MQTT [--amqp-port A] [--stomp-port S] --check NAME

A receiving check prints "ready" once it is subscribed (the Rust test starts the sender then),
and "ok NAME" once everything expected arrived; a sending check prints "ok NAME" once the
broker acknowledged everything. A failure prints "FAIL NAME: why" and exits 1.

The payloads and properties both sides expect are fixed here and in MqttJmsChecks.java: keep
them equal.
"""

import argparse
import os
import sys
import time
import traceback

import mqtt_checks
from mqtt_checks import CheckFailed, Client, VERSIONS, expect, expect_equal, mqtt

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

try:
    from proton import Message
    from proton.utils import BlockingConnection
except ImportError:  # pragma: no cover - reported to the caller
    sys.stderr.write("Qpid Proton is not installed for %s: run scripts/test\n" % sys.executable)
    sys.exit(2)

WAIT_SECONDS = mqtt_checks.WAIT_SECONDS

# Every byte value, then back down: NULs, 0xff and invalid UTF-8 (MqttJmsChecks.BINARY).
BINARY = bytes(range(256)) + bytes(reversed(range(256)))
TEXT = "h\u00e9llo \u2713"  # MqttJmsChecks.TEXT
USER_PROPERTIES = [("colour", "blue"), ("unicode", "\u00fcn\u00ef \u2713")]


def ready():
    print("ready", flush=True)


def publish_properties(pairs):
    properties = Properties(PacketTypes.PUBLISH)
    properties.UserProperty = list(pairs)
    return properties


def user_properties(message):
    """A delivered 5.0 message's user properties as a dict (the first of a repeated name)."""
    pairs = getattr(message.properties, "UserProperty", None) or []
    found = {}
    for name, value in pairs:
        found.setdefault(name, value)
    return found


def client(args, version, **kwargs):
    c = Client(args, version, **kwargs)
    c.expect_connected()
    return c


# --- MQTT <-> JMS ---------------------------------------------------------------------------


def check_publish_for_jms(args):
    """To `a/b`: 3.1.1 QoS 0 "mqtt 3.1.1 at 0" then QoS 1 BINARY; 5.0 QoS 1 BINARY with
    USER_PROPERTIES then QoS 2 TEXT (MqttJmsChecks.mqttToJms expects them in this order)."""
    v4 = client(args, mqtt.MQTTv311)
    v4.publish("a/b", b"mqtt 3.1.1 at 0", 0)
    v4.publish("a/b", BINARY, 1)
    v4.close()
    v5 = client(args, mqtt.MQTTv5)
    v5.publish("a/b", BINARY, 1, properties=publish_properties(USER_PROPERTIES))
    # Request/response and expiry: JMSReplyTo topic a.reply, JMSCorrelationID, JMSExpiration.
    properties = Properties(PacketTypes.PUBLISH)
    properties.ResponseTopic = "a/reply"
    properties.CorrelationData = b"corr-mqtt"
    properties.MessageExpiryInterval = 600
    v5.publish("a/b", TEXT.encode("utf-8"), 2, properties=properties)
    v5.close()


def expect_jms_messages(subscriber, version):
    """What MqttJmsChecks.jmsToMqtt sends to topic a.b, as received on `a/+` at QoS 1."""
    text = subscriber.receive("the JMS TextMessage on MQTT %s" % version)
    expect_equal((text.topic, text.payload, text.qos), ("a/b", TEXT.encode("utf-8"), 1),
                 "%s: a persistent TextMessage (topic, UTF-8 payload, QoS)" % version)
    binary = subscriber.receive("the JMS BytesMessage on MQTT %s" % version)
    expect_equal((binary.topic, binary.payload, binary.qos), ("a/b", BINARY, 0),
                 "%s: a non-persistent BytesMessage (topic, payload, QoS)" % version)
    if version == mqtt.MQTTv5:
        for message, expected in ((text, {"colour": "red", "count": "7"}), (binary, {"kind": "binary"})):
            found = user_properties(message)
            for name, value in expected.items():
                expect_equal(found.get(name), value, "5.0 user property %s (all: %r)" % (name, found))
        properties = text.properties
        expect_equal(getattr(properties, "PayloadFormatIndicator", None), 1, "a TextMessage is UTF-8")
        expect_equal(getattr(properties, "ResponseTopic", None), "a/reply", "JMSReplyTo as the response topic")
        expect_equal(getattr(properties, "CorrelationData", None), b"corr-jms", "JMSCorrelationID as correlation data")
        expiry = getattr(properties, "MessageExpiryInterval", None)
        expect(expiry is not None and 500 <= expiry <= 600, "the JMS time to live (600 s) as the expiry interval: %r" % expiry)
        expect_equal(getattr(binary.properties, "PayloadFormatIndicator", None), None, "a BytesMessage has no format indicator")
    subscriber.expect_quiet("after the JMS messages")


def check_receive_from_jms(args):
    subscribers = {}
    for version in VERSIONS.values():
        subscriber = client(args, version)
        expect_equal(subscriber.subscribe("a/+", 1), [1], "granted QoS")
        subscribers[version] = subscriber
    ready()
    for version, subscriber in subscribers.items():
        expect_jms_messages(subscriber, version)
        subscriber.close()


SESSION_IDS = {mqtt.MQTTv311: "mqtt-away-311", mqtt.MQTTv5: "mqtt-away-5"}


def session_client(args, version):
    if version == mqtt.MQTTv5:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 3600
        return client(args, version, client_id=SESSION_IDS[version], clean=False, properties=properties)
    return client(args, version, client_id=SESSION_IDS[version], clean=False)


def check_session_subscribe(args):
    """Persistent sessions (3.1.1 clean session 0, 5.0 session expiry) subscribe `away/mqtt`
    at QoS 1 and leave."""
    for version in VERSIONS.values():
        c = session_client(args, version)
        expect_equal(c.subscribe("away/mqtt", 1), [1], "granted QoS")
        c.close()


def check_publish_while_away(args):
    """For the JMS durable subscriber, which is away: two QoS 1 messages to `away/jms`."""
    c = client(args, mqtt.MQTTv5)
    for index in (1, 2):
        c.publish("away/jms", ("mqtt while away %d" % index).encode(), 1)
    c.close()


def check_session_resume(args):
    """The sessions resumed: what MqttJmsChecks.durableResumeAndSend sent meanwhile."""
    for version in VERSIONS.values():
        c = session_client(args, version)
        flags, _ = c.expect_connected()
        present = flags.session_present if hasattr(flags, "session_present") else flags.get("session present")
        expect(present, "the session is present for %s: %r" % (SESSION_IDS[version], flags))
        for index in (1, 2):
            message = c.receive("message %d queued while %s was away" % (index, SESSION_IDS[version]))
            expect_equal((message.topic, message.payload, message.qos),
                         ("away/mqtt", ("jms while away %d" % index).encode(), 1), "queued message")
        c.expect_quiet("after the queued messages")
        c.close()


# --- MQTT <-> AMQP --------------------------------------------------------------------------


def amqp_connection(args):
    return BlockingConnection("amqp://%s:%d" % (args.host, args.amqp_port), timeout=WAIT_SECONDS)


def body_bytes(message):
    body = message.body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise CheckFailed("expected a binary (Data) body, got %r" % (body,))


def check_amqp_receive_from_mqtt(args):
    """An AMQP receiver on topic://a.b gets publishes to `a/b`: the 5.0 one's bytes and user
    properties (as application properties), durable for QoS 1; the 3.1.1 QoS 0 one not."""
    connection = amqp_connection(args)
    receiver = connection.create_receiver("topic://a.b", credit=10)
    ready()
    first = receiver.receive(timeout=WAIT_SECONDS)
    receiver.accept()
    expect_equal(body_bytes(first), BINARY, "the 5.0 payload")
    expect_equal(first.durable, True, "QoS 1 is durable")
    properties = first.properties or {}
    for name, value in USER_PROPERTIES:
        expect_equal(properties.get(name), value, "application property %s (all: %r)" % (name, properties))
    second = receiver.receive(timeout=WAIT_SECONDS)
    receiver.accept()
    expect_equal(body_bytes(second), b"mqtt 3.1.1 at 0", "the 3.1.1 payload")
    expect_equal(second.durable, False, "QoS 0 is not durable")
    connection.close()


def check_publish_for_amqp(args):
    v5 = client(args, mqtt.MQTTv5)
    v5.publish("a/b", BINARY, 1, properties=publish_properties(USER_PROPERTIES))
    v5.close()
    v4 = client(args, mqtt.MQTTv311)
    v4.publish("a/b", b"mqtt 3.1.1 at 0", 0)
    v4.close()


def check_receive_from_amqp(args):
    subscribers = {}
    for version in VERSIONS.values():
        subscriber = client(args, version)
        expect_equal(subscriber.subscribe("a/+", 2), [2], "granted QoS")
        subscribers[version] = subscriber
    ready()
    for version, subscriber in subscribers.items():
        binary = subscriber.receive("the AMQP binary message on MQTT")
        expect_equal((binary.topic, binary.payload, binary.qos), ("a/b", BINARY, 1), "a durable Data section")
        text = subscriber.receive("the AMQP text message on MQTT")
        expect_equal((text.topic, text.payload, text.qos), ("a/b", TEXT.encode("utf-8"), 0), "a string AmqpValue")
        if version == mqtt.MQTTv5:
            expect_equal(user_properties(binary).get("colour"), "green", "application property as a user property (all: %r)" % user_properties(binary))
            expect_equal(user_properties(text).get("kind"), "text", "application property as a user property")
        subscriber.expect_quiet("after the AMQP messages")
        subscriber.close()


def check_amqp_send_to_mqtt(args):
    connection = amqp_connection(args)
    sender = connection.create_sender("topic://a.b")
    sender.send(Message(body=BINARY, durable=True, properties={"colour": "green"}))
    sender.send(Message(body=TEXT, durable=False, properties={"kind": "text"}))
    connection.close()


# --- MQTT <-> STOMP -------------------------------------------------------------------------


def stomp_connection(args):
    import stomp

    connection = stomp.Connection12([(args.host, args.stomp_port)], heartbeats=(0, 0), auto_decode=False)
    listener = mqtt_checks.StompListener()
    connection.set_listener("", listener)
    connection.connect(wait=True)
    return connection, listener


def check_stomp_receive_from_mqtt(args):
    """A STOMP subscriber of /topic/a.b gets the 5.0 publish's bytes (content-length) and its
    user properties as headers."""
    connection, listener = stomp_connection(args)
    connection.subscribe("/topic/a.b", id="1", ack="auto", headers={"receipt": "subscribed"})
    expect_equal(mqtt_checks.get(listener.receipts, "the SUBSCRIBE's receipt"), "subscribed", "receipt")
    ready()
    frame = mqtt_checks.get(listener.messages, "the MQTT message on STOMP")
    expect_equal(frame.body, BINARY, "the body")
    headers = frame.headers
    expect_equal(headers.get("content-length"), str(len(BINARY)), "content-length")
    expect_equal(headers.get("persistent"), "true", "QoS 1 is persistent")
    for name, value in USER_PROPERTIES:
        expect_equal(headers.get(name), value, "header %s (all: %r)" % (name, headers))
    connection.disconnect()


def check_publish_for_stomp(args):
    v5 = client(args, mqtt.MQTTv5)
    v5.publish("a/b", BINARY, 1, properties=publish_properties(USER_PROPERTIES))
    v5.close()


def check_receive_from_stomp(args):
    subscribers = {}
    for version in VERSIONS.values():
        subscriber = client(args, version)
        expect_equal(subscriber.subscribe("a/+", 1), [1], "granted QoS")
        subscribers[version] = subscriber
    ready()
    for version, subscriber in subscribers.items():
        message = subscriber.receive("the STOMP message on MQTT")
        expect_equal((message.topic, message.payload, message.qos), ("a/b", BINARY, 1), "a persistent binary SEND")
        if version == mqtt.MQTTv5:
            found = user_properties(message)
            expect_equal(found.get("colour"), "yellow", "header as a user property (all: %r)" % found)
            expect_equal(found.get("unicode"), USER_PROPERTIES[1][1], "a non-ASCII header")
        subscriber.expect_quiet("after the STOMP message")
        subscriber.close()


def check_stomp_send_to_mqtt(args):
    connection, listener = stomp_connection(args)
    headers = {"persistent": "true", "colour": "yellow", "unicode": USER_PROPERTIES[1][1], "receipt": "sent"}
    # stomp.py adds content-length for a bytes body: the NULs are body, not the frame's end.
    connection.send("/topic/a.b", BINARY, headers=headers)
    expect_equal(mqtt_checks.get(listener.receipts, "the SEND's receipt"), "sent", "receipt")
    connection.disconnect()


CHECKS = {name[len("check_"):]: function for name, function in globals().items() if name.startswith("check_")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="the MQTT port")
    parser.add_argument("--amqp-port", type=int)
    parser.add_argument("--stomp-port", type=int)
    parser.add_argument("--check", required=True, choices=sorted(CHECKS))
    args = parser.parse_args()
    # What mqtt_checks.Client reads besides host and port.
    args.ca = None
    started = time.monotonic()
    try:
        CHECKS[args.check](args)
    except CheckFailed as failure:
        print("FAIL %s: %s" % (args.check, failure), flush=True)
        return 1
    except Exception:  # an unexpected error fails the check with its trace
        print("FAIL %s: unexpected error" % args.check, flush=True)
        traceback.print_exc()
        return 1
    print("ok %s (%.1f s)" % (args.check, time.monotonic() - started), flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # paho's and stomp.py's network threads are daemons; leave without waiting for them.
    os._exit(code)
