#!/usr/bin/env python3
"""Checks a running ferromq broker through paho-mqtt, a real third-party MQTT client (MQTT
3.1.1 and 5.0), raw sockets for what no client sends, and stomp.py for the STOMP side of the
cross-protocol checks.

    mqtt_checks.py --host 127.0.0.1 --port 1883 [--stomp-port 61613] [--user U --password P]
                   --check NAME [--check NAME ...]

Prints "ok NAME" for each check that passes; on the first failure prints "FAIL NAME: why" to
stderr and exits with status 1 (status 2 for bad arguments or a missing client). The Rust
tests in tests/tests/integration/mqtt.rs run one check each, against a broker configured for
it.
"""

import argparse
import os
import queue
import socket
import struct
import sys
import threading
import time
import traceback
import uuid

try:
    import paho.mqtt.client as mqtt
    from paho.mqtt.properties import Properties
    from paho.mqtt.packettypes import PacketTypes
    import stomp
except ImportError:  # pragma: no cover - reported to the caller
    sys.stderr.write(
        "paho-mqtt or stomp.py is not installed for %s: run scripts/test, which creates .venv\n"
        % sys.executable
    )
    sys.exit(2)

# How long to wait for anything expected.
WAIT_SECONDS = 15.0
# How long to watch for what must not arrive.
QUIET_SECONDS = 0.7

VERSIONS = {"3.1.1": mqtt.MQTTv311, "5.0": mqtt.MQTTv5}


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def expect_equal(actual, expected, what):
    if actual != expected:
        raise CheckFailed("%s: expected %r, got %r" % (what, expected, actual))


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


class Client:
    """A paho client on its own network thread, its events in queues."""

    def __init__(self, args, version, client_id=None, clean=True, user=None, password=None, properties=None,
                 reconnect=True, will=None):
        self.version = version
        self.connacks = queue.Queue()
        self.messages = queue.Queue()
        self.subacks = queue.Queue()
        self.pubacks = queue.Queue()
        self.disconnects = queue.Queue()
        client_id = unique("paho") if client_id is None else client_id
        # reconnect=False: a client whose session is taken over must not take it back.
        if version == mqtt.MQTTv5:
            self.client = mqtt.Client(
                mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version, reconnect_on_failure=reconnect
            )
        else:
            self.client = mqtt.Client(
                mqtt.CallbackAPIVersion.VERSION2,
                client_id=client_id,
                protocol=version,
                clean_session=clean,
                reconnect_on_failure=reconnect,
            )
        if will is not None:
            self.client.will_set(will[0], will[1], qos=1)
        self.client.on_connect = lambda c, u, flags, rc, props: self.connacks.put((flags, rc, props))
        self.client.on_message = lambda c, u, message: self.messages.put(message)
        self.client.on_subscribe = lambda c, u, mid, rcs, props: self.subacks.put((mid, rcs))
        self.client.on_publish = lambda c, u, mid, rc, props: self.pubacks.put((mid, rc))
        self.client.on_disconnect = lambda c, u, flags, rc, props: self.disconnects.put(rc)
        if user is not None:
            self.client.username_pw_set(user, password)
        if args.ca:
            self.client.tls_set(ca_certs=args.ca)
        kwargs = {"keepalive": 60}
        if version == mqtt.MQTTv5:
            kwargs["clean_start"] = clean
            if properties is not None:
                kwargs["properties"] = properties
        self.client.connect(args.host, args.port, **kwargs)
        self.client.loop_start()
        self.connack = get(self.connacks, "CONNACK")

    def expect_connected(self):
        flags, rc, props = self.connack
        expect(not rc.is_failure, "CONNACK refused the connection: %s" % rc)
        return flags, props

    def subscribe(self, topic, qos, properties=None):
        result, mid = self.client.subscribe(topic, qos, properties=properties)
        expect_equal(result, mqtt.MQTT_ERR_SUCCESS, "subscribe result")
        got_mid, codes = get(self.subacks, "SUBACK")
        expect_equal(got_mid, mid, "SUBACK packet id")
        return [code.value for code in codes]

    def publish(self, topic, payload, qos, properties=None, retain=False):
        info = self.client.publish(topic, payload, qos, retain=retain, properties=properties)
        # paho reports a QoS 0 message once written, QoS 1 at its PUBACK, QoS 2 at PUBCOMP.
        got_mid, rc = get(self.pubacks, "PUBACK/PUBCOMP of message %d" % info.mid)
        expect_equal(got_mid, info.mid, "acknowledged packet id")
        return rc

    def receive(self, what):
        return get(self.messages, what)

    def expect_quiet(self, what):
        try:
            message = self.messages.get(timeout=QUIET_SECONDS)
        except queue.Empty:
            return
        raise CheckFailed("%s: got an unexpected message on %s: %r" % (what, message.topic, message.payload))

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def connect_when_free(args, version, client_id, clean):
    """Connects as `client_id` once the broker has let the last connection with that id go:
    a client that closes does not wait for the broker to notice (a CONNECT with the id of a
    live MQTT connection takes its session over, but this one is to find the session the
    last connection left)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        client = Client(args, version, client_id=client_id, clean=clean)
        _, rc, _ = client.connack
        if rc.value not in (0x02, 0x85) or time.monotonic() > deadline:
            return client
        client.client.loop_stop()


def get(events, what, timeout=WAIT_SECONDS):
    try:
        return events.get(timeout=timeout)
    except queue.Empty:
        raise CheckFailed("no %s within %.0f s" % (what, timeout))


# --- raw packets ---------------------------------------------------------------------------


def remaining_length(length):
    out = bytearray()
    while True:
        byte = length % 128
        length //= 128
        if length:
            byte |= 0x80
        out.append(byte)
        if not length:
            return bytes(out)


def string(text):
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("!H", len(data)) + data


def packet(first_byte, body):
    return bytes([first_byte]) + remaining_length(len(body)) + body


def connect_packet(client_id, level=4, name="MQTT", keep_alive=60, clean=True, user=None, password=None, will=None):
    flags = 0x02 if clean else 0
    payload = string(client_id)
    if will is not None:
        topic, message, qos = will
        flags |= 0x04 | (qos << 3)
        if level == 5:
            payload += b"\x00"  # no will properties
        payload += string(topic) + string(message)
    if user is not None:
        flags |= 0x80
        payload += string(user)
    if password is not None:
        flags |= 0x40
        payload += string(password)
    body = string(name) + bytes([level, flags]) + struct.pack("!H", keep_alive)
    if level == 5:
        body += b"\x00"  # no properties
    return packet(0x10, body + payload)


class Raw:
    """A socket speaking raw MQTT bytes."""

    def __init__(self, args):
        self.socket = socket.create_connection((args.host, args.port), timeout=WAIT_SECONDS)
        self.buffer = b""

    def send(self, data):
        self.socket.sendall(data)

    def read_packet(self, timeout=WAIT_SECONDS):
        """The next packet as (first byte, body); None once the broker closed."""
        deadline = time.monotonic() + timeout
        while True:
            parsed = self._parse()
            if parsed is not None:
                return parsed
            left = deadline - time.monotonic()
            if left <= 0:
                raise CheckFailed("no packet from the broker within %.0f s" % timeout)
            self.socket.settimeout(left)
            try:
                data = self.socket.recv(65536)
            except socket.timeout:
                raise CheckFailed("no packet from the broker within %.0f s" % timeout)
            except ConnectionResetError:
                data = b""
            if not data:
                if self.buffer:
                    raise CheckFailed("the broker closed in the middle of a packet: %r" % self.buffer)
                return None
            self.buffer += data

    def _parse(self):
        if len(self.buffer) < 2:
            return None
        length, shift, index = 0, 0, 1
        while True:
            if index >= len(self.buffer):
                return None
            byte = self.buffer[index]
            length |= (byte & 0x7F) << shift
            shift += 7
            index += 1
            if not byte & 0x80:
                break
        if len(self.buffer) < index + length:
            return None
        first, body = self.buffer[0], self.buffer[index : index + length]
        self.buffer = self.buffer[index + length :]
        return first, body

    def expect_closed(self, timeout=WAIT_SECONDS):
        """Waits for the broker to close; the packets it sent before, in order."""
        packets = []
        while True:
            parsed = self.read_packet(timeout)
            if parsed is None:
                return packets
            packets.append(parsed)

    def close(self):
        self.socket.close()


# --- checks --------------------------------------------------------------------------------


def check_connect_versions(args):
    """CONNACK accepts 3.1, 3.1.1 and 5.0; a 5.0 client without an id is given one; other
    levels are refused with the version's code; an empty id without clean session is
    refused."""
    for version in (mqtt.MQTTv31, mqtt.MQTTv311, mqtt.MQTTv5):
        client = Client(args, version)
        client.expect_connected()
        client.close()
    client = Client(args, mqtt.MQTTv5, client_id="")
    _, props = client.expect_connected()
    assigned = getattr(props, "AssignedClientIdentifier", None)
    expect(assigned, "a 5.0 client without an id got no Assigned Client Identifier")
    client.close()
    # MQTT 3.1 over the raw wire, then levels nobody speaks.
    for level, name, expected in ((3, "MQIsdp", b"\x20\x02\x00\x00"), (2, "MQTT", b"\x20\x02\x00\x01"), (6, "MQTT", b"\x20\x03\x00\x84\x00")):
        raw = Raw(args)
        raw.send(connect_packet(unique("raw"), level=level, name=name))
        first, body = raw.read_packet()
        expect_equal(bytes([first]) + bytes([len(body)]) + body, expected, "CONNACK to level %d" % level)
        if level != 3:
            expect_equal(raw.expect_closed(), [], "packets after the refusal of level %d" % level)
        raw.close()
    for level, expected in ((4, b"\x00\x02"), (5, b"\x00\x85")):
        raw = Raw(args)
        raw.send(connect_packet("", level=level, clean=False))
        first, body = raw.read_packet()
        expect_equal(first, 0x20, "CONNACK type")
        expect_equal(body[:2], expected, "CONNACK to an empty id without clean session (level %d)" % level)
        raw.expect_closed()
        raw.close()


def check_bad_password(args):
    """A wrong password is refused with 0x04 (3.1.1) or 0x86 (5.0), a good one accepted."""
    raw = Raw(args)
    raw.send(connect_packet(unique("raw"), user=args.user, password="wrong"))
    first, body = raw.read_packet()
    expect_equal((first, body), (0x20, b"\x00\x04"), "3.1.1 CONNACK to a wrong password")
    raw.expect_closed()
    client = Client(args, mqtt.MQTTv5, user=args.user, password="wrong")
    _, rc, _ = client.connack
    expect_equal(rc.value, 0x86, "5.0 CONNACK reason to a wrong password")
    client.client.loop_stop()
    for version in VERSIONS.values():
        good = Client(args, version, user=args.user, password=args.password)
        good.expect_connected()
        good.close()


def check_pubsub_qos(args):
    """QoS 0, 1 and 2 through wildcard subscriptions, delivered at the lower of the
    subscription's QoS and the message's, in both versions."""
    for label, version in VERSIONS.items():
        base = "ferromq/%s" % unique("qos")
        subscriber = Client(args, version)
        subscriber.expect_connected()
        expect_equal(subscriber.subscribe(base + "/+/two", 2), [2], "granted QoS of +")
        expect_equal(subscriber.subscribe(base + "/one/#", 1), [1], "granted QoS of #")
        publisher = Client(args, version)
        publisher.expect_connected()
        for qos in (0, 1, 2):
            publisher.publish("%s/a/two" % base, ("plus %d" % qos).encode(), qos)
            message = subscriber.receive("the QoS %d message through +" % qos)
            expect_equal((message.topic, message.payload, message.qos), ("%s/a/two" % base, ("plus %d" % qos).encode(), qos), "%s delivery through +" % label)
        for qos in (0, 1, 2):
            publisher.publish("%s/one/x/y" % base, bytes([0, 255, qos]), qos)
            message = subscriber.receive("the QoS %d message through #" % qos)
            expect_equal((message.topic, message.payload, message.qos), ("%s/one/x/y" % base, bytes([0, 255, qos]), min(qos, 1)), "%s delivery through #" % label)
        # `$` topics are not matched by a leading wildcard.
        everything = Client(args, version)
        everything.expect_connected()
        everything.subscribe("#", 0)
        publisher.publish("$SYS/%s" % unique("x"), b"system", 1)
        publisher.publish("%s/visible" % base, b"visible", 1)
        while True:
            # Advisories (ActiveMQ.Advisory.*) match # too, as in ActiveMQ.
            message = everything.receive("the message to an ordinary topic")
            expect(not message.topic.startswith("$"), "# matched %s" % message.topic)
            if message.payload == b"visible":
                break
        subscriber.expect_quiet("after the deliveries")
        for client in (subscriber, publisher, everything):
            client.close()


class StompListener(stomp.ConnectionListener):
    def __init__(self):
        self.messages = queue.Queue()
        self.receipts = queue.Queue()

    def on_message(self, frame):
        self.messages.put(frame)

    def on_receipt(self, frame):
        self.receipts.put(frame.headers.get("receipt-id"))


def stomp_connection(args, headers=None):
    connection = stomp.Connection12([(args.host, args.stomp_port)], heartbeats=(0, 0))
    listener = StompListener()
    connection.set_listener("", listener)
    connection.connect(wait=True, headers=headers)
    return connection, listener


def check_stomp_interop(args):
    """A QoS 1 PUBLISH reaches a STOMP subscriber of the dotted topic as a persistent message
    with its payload; a STOMP SEND reaches an MQTT subscriber."""
    name = unique("cross")
    connection, listener = stomp_connection(args)
    connection.subscribe("/topic/ferromq.%s.in" % name, id="1", ack="auto", headers={"receipt": "sub-1"})
    expect_equal(get(listener.receipts, "the SUBSCRIBE's receipt"), "sub-1", "receipt")
    for version in VERSIONS.values():
        client = Client(args, version)
        client.expect_connected()
        client.publish("ferromq/%s/in" % name, b"from mqtt", 1)
        frame = get(listener.messages, "the MQTT message on STOMP")
        expect_equal(frame.headers.get("destination"), "/topic/ferromq.%s.in" % name, "STOMP destination")
        expect_equal(frame.body, "from mqtt", "STOMP body")
        expect_equal(frame.headers.get("persistent"), "true", "QoS 1 is persistent")
        client.subscribe("ferromq/%s/out/#" % name, 2)
        connection.send("/topic/ferromq.%s.out.x" % name, "from stomp", headers={"persistent": "true", "receipt": "r1"})
        message = client.receive("the STOMP message on MQTT")
        expect_equal((message.topic, message.payload, message.qos), ("ferromq/%s/out/x" % name, b"from stomp", 1), "MQTT delivery of a persistent STOMP message")
        connection.send("/topic/ferromq.%s.out.y" % name, "quick", headers={"receipt": "r2"})
        message = client.receive("the non-persistent STOMP message on MQTT")
        expect_equal((message.topic, message.payload, message.qos), ("ferromq/%s/out/y" % name, b"quick", 0), "MQTT delivery of a non-persistent STOMP message")
        client.close()
    connection.disconnect()


def check_keep_alive(args):
    """A client that sends CONNECT with keep alive 1 and then nothing is closed after 1.5 s."""
    for level in (4, 5):
        raw = Raw(args)
        raw.send(connect_packet(unique("silent"), level=level, keep_alive=1))
        first, body = raw.read_packet()
        expect_equal(first, 0x20, "CONNACK")
        started = time.monotonic()
        packets = raw.expect_closed(timeout=10)
        elapsed = time.monotonic() - started
        # Not before 1.5 times the keep alive (less a little for the clocks); the upper bound only
        # catches a deadline that never fires, with room for a loaded CI machine.
        expect(1.3 <= elapsed <= 8.0, "closed after %.2f s, expected about 1.5 s" % elapsed)
        if level == 5:
            expect_equal([(p[0], p[1][:1]) for p in packets], [(0xE0, b"\x8d")], "5.0 DISCONNECT before the close")
        else:
            expect_equal(packets, [], "3.1.1 packets before the close")
        raw.close()
    # One that pings stays.
    raw = Raw(args)
    raw.send(connect_packet(unique("pinging"), keep_alive=1))
    raw.read_packet()
    for _ in range(4):
        time.sleep(0.5)
        raw.send(b"\xc0\x00")
        expect_equal(raw.read_packet(), (0xD0, b""), "PINGRESP")
    raw.close()


def check_malformed(args):
    """A malformed packet closes its connection only (5.0: after a DISCONNECT 0x81); a
    packet before CONNECT and a second CONNECT close too."""
    topic = "ferromq/%s" % unique("bystander")
    bystander = Client(args, mqtt.MQTTv311)
    bystander.expect_connected()
    bystander.subscribe(topic, 1)
    # PUBLISH with QoS 3.
    for level, expected in ((4, []), (5, [(0xE0, b"\x81")])):
        raw = Raw(args)
        raw.send(connect_packet(unique("bad"), level=level))
        raw.read_packet()
        raw.send(b"\x36\x05\x00\x01a\x00\x01")
        packets = raw.expect_closed()
        expect_equal([(p[0], p[1][:1]) for p in packets], expected, "level %d packets before the close" % level)
        raw.close()
    # A second CONNECT.
    raw = Raw(args)
    raw.send(connect_packet(unique("twice"), level=5))
    raw.read_packet()
    raw.send(connect_packet(unique("twice"), level=5))
    packets = raw.expect_closed()
    expect_equal([(p[0], p[1][:1]) for p in packets], [(0xE0, b"\x82")], "DISCONNECT after a second CONNECT")
    # A PINGREQ before CONNECT.
    raw = Raw(args)
    raw.send(b"\xc0\x00")
    expect_equal(raw.expect_closed(), [], "packets after a PINGREQ before CONNECT")
    publisher = Client(args, mqtt.MQTTv311)
    publisher.expect_connected()
    publisher.publish(topic, b"still here", 1)
    message = bystander.receive("the bystander's message")
    expect_equal(message.payload, b"still here", "the bystander's message")
    publisher.close()
    bystander.close()


def check_authorization(args):
    """A subscription the user may not read gets 0x80 (3.1.1) or 0x87 (5.0) and the
    connection goes on; a 5.0 QoS 1 PUBLISH it may not write gets PUBACK 0x87."""
    for label, version in VERSIONS.items():
        client = Client(args, version, user=args.user, password=args.password)
        client.expect_connected()
        refused = 0x80 if version == mqtt.MQTTv311 else 0x87
        open_topic = "mqtt/open/%s" % unique("t")
        expect_equal(client.subscribe("mqtt/secret/#", 1), [refused], "%s SUBACK of a refused filter" % label)
        expect_equal(client.subscribe(open_topic, 1), [1], "%s SUBACK after the refusal" % label)
        client.publish(open_topic, b"allowed", 1)
        message = client.receive("the message on the allowed topic")
        expect_equal(message.payload, b"allowed", "the allowed message")
        if version == mqtt.MQTTv5:
            rc = client.publish("mqtt/secret/x", b"refused", 1)
            expect_equal(rc.value, 0x87, "PUBACK reason of a refused PUBLISH")
            client.publish(open_topic, b"after", 1)
            expect_equal(client.receive("the message after the refused PUBLISH").payload, b"after", "message after the refusal")
        client.close()


def check_qos2_exactly_once(args):
    """A QoS 2 PUBLISH resent with DUP before its PUBREL is published once; PUBREC is
    answered each time, PUBREL with PUBCOMP."""
    topic = "ferromq/%s" % unique("exactly")
    subscriber = Client(args, mqtt.MQTTv311)
    subscriber.expect_connected()
    subscriber.subscribe(topic, 2)
    raw = Raw(args)
    raw.send(connect_packet(unique("raw")))
    raw.read_packet()
    body = string(topic) + struct.pack("!H", 7) + b"once"
    raw.send(packet(0x34, body))
    expect_equal(raw.read_packet(), (0x50, b"\x00\x07"), "PUBREC")
    raw.send(packet(0x3C, body))  # DUP
    expect_equal(raw.read_packet(), (0x50, b"\x00\x07"), "PUBREC of the resend")
    raw.send(b"\x62\x02\x00\x07")
    expect_equal(raw.read_packet(), (0x70, b"\x00\x07"), "PUBCOMP")
    message = subscriber.receive("the QoS 2 message")
    expect_equal((message.payload, message.qos), (b"once", 2), "the QoS 2 message")
    subscriber.expect_quiet("after the QoS 2 message")
    raw.close()
    subscriber.close()


def check_persistent_session(args):
    """A 3.1.1 client with clean session 0 finds its QoS 1 subscription and the messages
    published while it was away when it comes back (session present); a clean session
    discards them."""
    client_id = unique("persistent")
    topic = "ferromq/%s" % client_id
    first = Client(args, mqtt.MQTTv311, client_id=client_id, clean=False)
    flags, _ = first.expect_connected()
    expect(not flags.session_present, "a new session was present")
    first.subscribe(topic + "/#", 1)
    first.close()
    publisher = Client(args, mqtt.MQTTv311)
    publisher.expect_connected()
    for index in range(3):
        publisher.publish("%s/%d" % (topic, index), b"kept %d" % index, 1)
    again = connect_when_free(args, mqtt.MQTTv311, client_id, False)
    flags, _ = again.expect_connected()
    expect(flags.session_present, "the persistent session was not present")
    payloads = [again.receive("kept message %d" % index).payload for index in range(3)]
    expect_equal(payloads, [b"kept 0", b"kept 1", b"kept 2"], "messages kept while away")
    again.close()
    clean = connect_when_free(args, mqtt.MQTTv311, client_id, True)
    flags, _ = clean.expect_connected()
    expect(not flags.session_present, "a clean session was present")
    clean.close()
    publisher.publish("%s/late" % topic, b"late", 1)
    last = connect_when_free(args, mqtt.MQTTv311, client_id, False)
    flags, _ = last.expect_connected()
    expect(not flags.session_present, "the session survived a clean session")
    last.expect_quiet("after the clean session")
    last.close()
    publisher.close()


def check_will(args):
    """A will is published when the connection drops, breaks the protocol or goes silent,
    and when a 5.0 DISCONNECT asks for it; a plain DISCONNECT discards it."""
    topic = "ferromq/%s" % unique("will")
    subscriber = Client(args, mqtt.MQTTv311)
    subscriber.expect_connected()
    subscriber.subscribe(topic + "/#", 2)

    def connected(level, what, keep_alive=60):
        raw = Raw(args)
        raw.send(connect_packet(unique("willing"), level=level, keep_alive=keep_alive, will=("%s/%s" % (topic, what), what, 1)))
        first, body = raw.read_packet()
        expect_equal((first, body[:2]), (0x20, b"\x00\x00"), "CONNACK of a CONNECT with a will")
        return raw

    raw = connected(4, "dropped")
    raw.socket.shutdown(socket.SHUT_RDWR)
    raw.close()
    message = subscriber.receive("the will of a dropped connection")
    expect_equal((message.topic, message.payload, message.qos), ("%s/dropped" % topic, b"dropped", 1), "will of a dropped connection")
    raw = connected(4, "malformed")
    raw.send(b"\x36\x05\x00\x01a\x00\x01")
    raw.expect_closed()
    expect_equal(subscriber.receive("the will after a malformed packet").payload, b"malformed", "will after a malformed packet")
    raw = connected(5, "silent", keep_alive=1)
    raw.expect_closed()
    expect_equal(subscriber.receive("the will of a silent client").payload, b"silent", "will of a silent client")
    raw = connected(5, "asked")
    raw.send(b"\xe0\x01\x04")
    raw.expect_closed()
    expect_equal(subscriber.receive("the will a 5.0 DISCONNECT asked for").payload, b"asked", "will asked for")
    # A retained will is accepted, published, and retained when published.
    raw = Raw(args)
    will = connect_packet(unique("retained"), level=5, will=("%s/retained" % topic, "r", 1))
    will = will[:9] + bytes([will[9] | 0x20]) + will[10:]  # the will retain flag
    raw.send(will)
    first, body = raw.read_packet()
    expect_equal((first, body[:2]), (0x20, b"\x00\x00"), "CONNACK to a retained will")
    raw.socket.shutdown(socket.SHUT_RDWR)
    raw.close()
    message = subscriber.receive("the retained will")
    expect_equal((message.payload, message.retain), (b"r", False), "a retained will to an existing subscription")
    late = Client(args, mqtt.MQTTv311)
    late.expect_connected()
    late.subscribe(topic + "/retained", 1)
    message = late.receive("the retained will at a new subscription")
    expect_equal((message.payload, message.retain), (b"r", True), "the retained will at a new subscription")
    late.close()
    for level in (4, 5):
        raw = connected(level, "discarded")
        raw.send(b"\xe0\x00")
        raw.expect_closed()
        raw.close()
    subscriber.expect_quiet("after DISCONNECTs")
    subscriber.close()


def check_properties_and_retain(args):
    """5.0 user properties, response topic and correlation data reach a 5.0 subscriber and
    a STOMP one (as headers); CONNACK says Retain Available 1; a retained PUBLISH reaches
    established subscriptions with the retain flag 0, and STOMP with ActiveMQ.Retain true."""
    topic = "ferromq/%s" % unique("props")
    subscriber = Client(args, mqtt.MQTTv5)
    flags, props = subscriber.expect_connected()
    expect_equal(getattr(props, "RetainAvailable", None), 1, "CONNACK Retain Available")
    subscriber.subscribe(topic + "/#", 1)
    connection, listener = stomp_connection(args)
    connection.subscribe("/topic/%s.>" % topic.replace("/", "."), id="1", ack="auto", headers={"receipt": "sub"})
    expect_equal(get(listener.receipts, "the SUBSCRIBE's receipt"), "sub", "receipt")
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    properties = Properties(PacketTypes.PUBLISH)
    properties.UserProperty = [("colour", "blue"), ("size", "7")]
    properties.ResponseTopic = topic + "/replies"
    properties.CorrelationData = b"request-1"
    publisher.publish(topic + "/a", b"with properties", 1, properties=properties)
    message = subscriber.receive("the message with properties")
    got = message.properties
    expect_equal(sorted(getattr(got, "UserProperty", [])), [("colour", "blue"), ("size", "7")], "user properties")
    expect_equal(getattr(got, "ResponseTopic", None), topic + "/replies", "response topic")
    expect_equal(getattr(got, "CorrelationData", None), b"request-1", "correlation data")
    frame = get(listener.messages, "the message with properties on STOMP")
    expect_equal((frame.headers.get("colour"), frame.headers.get("size")), ("blue", "7"), "STOMP headers of user properties")
    expect_equal(frame.headers.get("reply-to"), "/topic/%s.replies" % topic.replace("/", "."), "STOMP reply-to")
    expect_equal(frame.headers.get("correlation-id"), "request-1", "STOMP correlation-id")
    old = Client(args, mqtt.MQTTv311)
    old.expect_connected()
    old.publish(topic + "/retained", b"not kept", 1)
    info = old.client.publish(topic + "/retained", b"retain flag", 1, retain=True)
    get(old.pubacks, "PUBACK of the retained message")
    message = subscriber.receive("the 3.1.1 retained message")
    message = subscriber.receive("the 3.1.1 retained message") if message.payload == b"not kept" else message
    expect_equal((message.payload, message.retain), (b"retain flag", False), "a 3.1.1 retained PUBLISH")
    old.close()
    publisher.publish(topic + "/retained", b"5.0 retained", 1)
    message = subscriber.receive("the 5.0 message after the retained one")
    expect_equal((message.payload, message.retain), (b"5.0 retained", False), "the next message")
    publisher.client.publish(topic + "/retained", b"5.0 kept", 1, retain=True)
    message = subscriber.receive("the 5.0 retained message")
    expect_equal((message.payload, message.retain), (b"5.0 kept", False), "a 5.0 retained PUBLISH")
    expect(publisher.disconnects.empty(), "a retained 5.0 PUBLISH disconnected its client")
    frames = [get(listener.messages, "message %d on STOMP" % n) for n in range(4)]
    retained = [frame for frame in frames if frame.body in ("retain flag", b"retain flag")]
    expect_equal(len(retained), 1, "the retained message on STOMP")
    expect_equal(retained[0].headers.get("ActiveMQ.Retain"), "true", "STOMP header ActiveMQ.Retain")
    publisher.close()
    subscriber.close()
    connection.disconnect()


def collect(client, what):
    """Every message that arrives until none has come for QUIET_SECONDS: {topic: message}."""
    found = {}
    first = client.receive(what)
    found[first.topic] = first
    while True:
        try:
            message = client.messages.get(timeout=QUIET_SECONDS)
        except queue.Empty:
            return found
        expect(message.topic not in found, "%s: %s delivered twice" % (what, message.topic))
        found[message.topic] = message


def subscribe_with(client, topic, qos, retain_handling=0, retain_as_published=False):
    """A 5.0 SUBSCRIBE with retain options; the SUBACK's codes."""
    from paho.mqtt.subscribeoptions import SubscribeOptions

    options = SubscribeOptions(qos=qos, retainAsPublished=retain_as_published, retainHandling=retain_handling)
    result, mid = client.client.subscribe(topic, options=options)
    expect_equal(result, mqtt.MQTT_ERR_SUCCESS, "subscribe result")
    got_mid, codes = get(client.subacks, "SUBACK")
    expect_equal(got_mid, mid, "SUBACK packet id")
    return [code.value for code in codes]


def check_retained(args):
    """Over 3.1.1 and 5.0: a retained message is delivered to each new matching subscription
    with the retain flag (at the lower QoS), only the newest of a topic, none once an empty
    payload cleared it; `+` and `#` get every matching retained topic but `#` not `$SYS/...`;
    an established subscription gets a retained PUBLISH with the flag 0."""
    system = "$SYS/ferromq/%s" % unique("sys")
    for name, version in VERSIONS.items():
        prefix = "ferromq/%s" % unique("retained")
        live = Client(args, version)
        live.expect_connected()
        live.subscribe(prefix + "/#", 2)
        publisher = Client(args, version)
        publisher.expect_connected()
        for topic, payload, qos in (("a", b"first", 1), ("a", b"second", 1), ("b", b"bee", 2), ("gone", b"soon", 1), ("gone", b"", 1)):
            info = publisher.client.publish("%s/%s" % (prefix, topic), payload, qos, retain=True)
            got_mid, _ = get(publisher.pubacks, "the acknowledgement of retained %s" % topic)
            expect_equal(got_mid, info.mid, "acknowledged packet id")
        info = publisher.client.publish(system, b"system", 1, retain=True)
        get(publisher.pubacks, "the acknowledgement of the retained $SYS message")
        for n in range(5):
            message = live.receive("retained PUBLISH %d on the established subscription" % n)
            expect(not message.retain, "%s: an established subscription got the retain flag on %s" % (name, message.topic))
        subscriber = Client(args, version)
        subscriber.expect_connected()
        subscriber.subscribe(prefix + "/a", 2)
        message = subscriber.receive("%s: the retained message at subscribe" % name)
        expect_equal((message.topic, message.payload, message.retain, message.qos), (prefix + "/a", b"second", True, 1), "%s: retained message" % name)
        subscriber.expect_quiet("%s: only the newest retained message" % name)
        subscriber.subscribe(prefix + "/gone", 1)
        subscriber.expect_quiet("%s: a cleared topic" % name)
        subscriber.subscribe(prefix + "/+", 1)
        found = collect(subscriber, "%s: retained messages of prefix/+" % name)
        got = sorted((t, m.payload, m.retain, m.qos) for t, m in found.items())
        expect_equal(got, [(prefix + "/a", b"second", True, 1), (prefix + "/b", b"bee", True, 1)], "%s: retained messages of +" % name)
        everything = Client(args, version)
        everything.expect_connected()
        everything.subscribe("#", 0)
        found = collect(everything, "%s: retained messages of #" % name)
        expect(prefix + "/a" in found and prefix + "/b" in found, "%s: # missed retained topics: %s" % (name, sorted(found)))
        expect(not any(t.startswith("$") for t in found), "%s: # got $ topics: %s" % (name, sorted(found)))
        expect(all(m.retain and m.qos == 0 for m in found.values()), "%s: # deliveries not retained at QoS 0" % name)
        everything.subscribe("$SYS/ferromq/#", 0)
        message = everything.receive("%s: the retained $SYS message for its own filter" % name)
        expect_equal((message.topic, message.payload, message.retain), (system, b"system", True), "%s: $SYS retained" % name)
        for client in (everything, subscriber, publisher, live):
            client.close()


def check_retain_options(args):
    """5.0 Retain Handling 0 sends the retained messages at every SUBSCRIBE, 1 only when
    the subscription is new, 2 never; Retain As Published keeps the retain flag on ordinary
    deliveries, which are otherwise sent with 0."""
    prefix = "ferromq/%s" % unique("options")
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    info = publisher.client.publish(prefix + "/x", b"kept", 1, retain=True)
    get(publisher.pubacks, "the PUBACK of the retained message")
    new_only = Client(args, mqtt.MQTTv5)
    new_only.expect_connected()
    subscribe_with(new_only, prefix + "/x", 1, retain_handling=1)
    message = new_only.receive("the retained message for a new subscription (handling 1)")
    expect_equal((message.payload, message.retain), (b"kept", True), "handling 1, new")
    subscribe_with(new_only, prefix + "/x", 1, retain_handling=1)
    new_only.expect_quiet("handling 1 on an existing subscription")
    subscribe_with(new_only, prefix + "/x", 1, retain_handling=0)
    message = new_only.receive("the retained message again (handling 0)")
    expect_equal((message.payload, message.retain), (b"kept", True), "handling 0, existing")
    never = Client(args, mqtt.MQTTv5)
    never.expect_connected()
    subscribe_with(never, prefix + "/#", 1, retain_handling=2)
    never.expect_quiet("handling 2")
    keeps = Client(args, mqtt.MQTTv5)
    keeps.expect_connected()
    subscribe_with(keeps, prefix + "/y", 1, retain_as_published=True)
    plain = Client(args, mqtt.MQTTv5)
    plain.expect_connected()
    subscribe_with(plain, prefix + "/y", 1)
    publisher.client.publish(prefix + "/y", b"live", 1, retain=True)
    get(publisher.pubacks, "the PUBACK of the live retained message")
    publisher.publish(prefix + "/y", b"not retained", 1)
    message = keeps.receive("the retained message, retain as published")
    expect_equal((message.payload, message.retain), (b"live", True), "retain as published")
    message = keeps.receive("the plain message, retain as published")
    expect_equal((message.payload, message.retain), (b"not retained", False), "retain as published, plain message")
    message = plain.receive("the retained message without retain as published")
    expect_equal((message.payload, message.retain), (b"live", False), "without retain as published")
    message = never.receive("the live message for handling 2")
    expect_equal((message.topic, message.retain), (prefix + "/y", False), "handling 2 live delivery")
    for client in (publisher, new_only, never, keeps, plain):
        client.close()


RESTART_PREFIX = "ferromq/restart"


def check_retained_publish(args):
    """Before a restart: retained messages of QoS 0, 1 and 2, one replaced and one cleared."""
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    for topic, payload, qos in (("a", b"old", 1), ("a", b"survives", 2), ("c", b"cleared", 1), ("c", b"", 1)):
        publisher.client.publish("%s/%s" % (RESTART_PREFIX, topic), payload, qos, retain=True)
        get(publisher.pubacks, "the acknowledgement of retained %s" % topic)
    publisher.client.publish(RESTART_PREFIX + "/b", b"at most once", 0, retain=True)
    get(publisher.pubacks, "the write of the QoS 0 retained message")
    # Behind the QoS 0 one on the same connection: once acknowledged, the broker took both.
    publisher.publish("ferromq/elsewhere", b"x", 1)
    publisher.close()


def check_retained_after_restart(args):
    """After a restart on the same store: the retained messages are delivered on subscribe."""
    for version in VERSIONS.values():
        subscriber = Client(args, version)
        subscriber.expect_connected()
        subscriber.subscribe(RESTART_PREFIX + "/#", 2)
        found = collect(subscriber, "the retained messages after the restart")
        got = sorted((t, m.payload, m.retain, m.qos) for t, m in found.items())
        expected = [(RESTART_PREFIX + "/a", b"survives", True, 2), (RESTART_PREFIX + "/b", b"at most once", True, 0)]
        expect_equal(got, expected, "retained messages after the restart")
        subscriber.close()


def check_tls(args):
    """Over mqtt+ssl://, trusting the test CA, both versions connect and exchange a QoS 1
    message."""
    expect(args.ca, "the tls check needs --ca")
    for label, version in VERSIONS.items():
        topic = "ferromq/%s" % unique("tls")
        client = Client(args, version)
        client.expect_connected()
        client.subscribe(topic, 1)
        client.publish(topic, b"over tls", 1)
        message = client.receive("the message over TLS")
        expect_equal((message.payload, message.qos), (b"over tls", 1), "%s message over TLS" % label)
        client.close()


def variable_int(value):
    return remaining_length(value)


def raw_v5_connected(args):
    """A raw socket past a 5.0 CONNECT and its CONNACK."""
    raw = Raw(args)
    raw.send(connect_packet(unique("raw5"), level=5))
    first, body = raw.read_packet()
    expect_equal((first, body[1]), (0x20, 0x00), "CONNACK to a raw 5.0 CONNECT")
    return raw


def expect_disconnect(raw, reason, what):
    """The broker sends DISCONNECT with `reason`, then closes."""
    packets = raw.expect_closed()
    expect(packets, "%s: the broker closed without a DISCONNECT" % what)
    first, body = packets[-1]
    expect_equal((first, body[:1]), (0xE0, bytes([reason])), "%s: DISCONNECT and its reason" % what)
    raw.close()


def check_topic_aliases(args):
    """CONNACK announces Topic Alias Maximum 64; a PUBLISH with an alias and a topic sets the
    alias, one with the alias and the empty topic goes to its topic; an alias of 0, above 64,
    or unknown with the empty topic gets DISCONNECT 0x94."""
    topic = "ferromq/%s" % unique("alias")
    subscriber = Client(args, mqtt.MQTTv5)
    subscriber.expect_connected()
    subscriber.subscribe(topic + "/#", 1)
    publisher = Client(args, mqtt.MQTTv5)
    _, props = publisher.expect_connected()
    expect_equal(getattr(props, "TopicAliasMaximum", None), 64, "CONNACK Topic Alias Maximum")

    def aliased(alias):
        properties = Properties(PacketTypes.PUBLISH)
        properties.TopicAlias = alias
        return properties

    publisher.publish(topic + "/one", b"sets alias 1", 1, properties=aliased(1))
    publisher.publish(topic + "/two", b"sets alias 64", 1, properties=aliased(64))
    publisher.publish("", b"through alias 1", 1, properties=aliased(1))
    publisher.publish("", b"through alias 64", 1, properties=aliased(64))
    # An alias set again names its new topic from then on.
    publisher.publish(topic + "/three", b"moves alias 1", 1, properties=aliased(1))
    publisher.publish("", b"through moved alias 1", 1, properties=aliased(1))
    got = [subscriber.receive("aliased message %d" % index) for index in range(6)]
    expect_equal(
        [(message.topic, message.payload) for message in got],
        [
            (topic + "/one", b"sets alias 1"),
            (topic + "/two", b"sets alias 64"),
            (topic + "/one", b"through alias 1"),
            (topic + "/two", b"through alias 64"),
            (topic + "/three", b"moves alias 1"),
            (topic + "/three", b"through moved alias 1"),
        ],
        "topics and payloads of aliased PUBLISHes",
    )
    expect(
        all(getattr(message.properties, "TopicAlias", None) is None for message in got),
        "a delivery carried the publisher's topic alias",
    )
    publisher.close()
    # What no client sends: QoS 0 PUBLISHes with a bad alias.
    for name, topic_name, alias in (("above the maximum", topic + "/x", 65), ("unknown", "", 5), ("zero", topic + "/x", 0)):
        raw = raw_v5_connected(args)
        properties = b"\x23" + struct.pack("!H", alias)
        raw.send(packet(0x30, string(topic_name) + variable_int(len(properties)) + properties + b"bad"))
        expect_disconnect(raw, 0x94, "a topic alias %s" % name)
    subscriber.expect_quiet("after the PUBLISHes with bad aliases")
    subscriber.close()


def check_subscription_identifiers(args):
    """CONNACK announces Subscription Identifier Available 1; each delivery carries the
    identifier of the subscription it matched, none for a subscription without one; a
    SUBSCRIBE with identifier 0 gets DISCONNECT 0x82."""
    topic = "ferromq/%s" % unique("subid")
    subscriber = Client(args, mqtt.MQTTv5)
    _, props = subscriber.expect_connected()
    expect_equal(getattr(props, "SubscriptionIdentifierAvailable", None), 1, "CONNACK Subscription Identifier Available")

    def identified(identifier):
        properties = Properties(PacketTypes.SUBSCRIBE)
        properties.SubscriptionIdentifier = identifier
        return properties

    expect_equal(subscriber.subscribe(topic + "/a/#", 1, properties=identified(7)), [1], "SUBACK with identifier 7")
    expect_equal(subscriber.subscribe(topic + "/+/x", 0, properties=identified(268435455)), [0], "SUBACK with the largest identifier")
    expect_equal(subscriber.subscribe(topic + "/a/x", 1), [1], "SUBACK without identifier")
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    publisher.publish(topic + "/a/x", b"matches three", 1)
    got = [subscriber.receive("delivery %d of the message" % index) for index in range(3)]
    identifiers = sorted(tuple(getattr(message.properties, "SubscriptionIdentifier", [])) for message in got)
    expect_equal(identifiers, [(), (7,), (268435455,)], "subscription identifiers of the three deliveries")
    publisher.publish(topic + "/b/x", b"matches one", 1)
    message = subscriber.receive("the message for the wildcard subscription")
    expect_equal(
        (message.payload, getattr(message.properties, "SubscriptionIdentifier", None)),
        (b"matches one", [268435455]),
        "delivery to the identified wildcard subscription",
    )
    subscriber.expect_quiet("after the identified deliveries")
    publisher.close()
    subscriber.close()
    # An identifier of 0 is a Protocol Error (3.8.2.1.2).
    raw = raw_v5_connected(args)
    properties = b"\x0b\x00"
    raw.send(packet(0x82, struct.pack("!H", 1) + variable_int(len(properties)) + properties + string(topic + "/#") + b"\x01"))
    expect_disconnect(raw, 0x82, "a subscription identifier of 0")


def subscribe_packet(packet_id, topic_filter, qos):
    """A 3.1.1 SUBSCRIBE."""
    return packet(0x82, struct.pack("!H", packet_id) + string(topic_filter) + bytes([qos]))


def check_take_over(args):
    """A CONNECT with the client id of a live MQTT connection takes its session over: the old
    connection is closed (5.0: DISCONNECT 0x8E), its will published, its unacknowledged
    delivery redelivered to the new one, which finds the persistent session present and gets
    what is published afterwards. A client id a STOMP connection holds is still refused, and
    STOMP still refuses one an MQTT connection holds."""
    # 5.0, persistent session, a will.
    client_id = unique("taken")
    topic = "ferromq/%s" % client_id
    watcher = Client(args, mqtt.MQTTv311)
    watcher.expect_connected()
    watcher.subscribe(topic + "/will", 1)
    expiry = Properties(PacketTypes.CONNECT)
    expiry.SessionExpiryInterval = 3600
    old = Client(args, mqtt.MQTTv5, client_id=client_id, clean=False, properties=expiry, reconnect=False,
                 will=(topic + "/will", b"old one gone"))
    flags, _ = old.expect_connected()
    expect(not flags.session_present, "a new session was present")
    expect_equal(old.subscribe(topic + "/data", 1), [1], "the old connection's SUBACK")
    new = Client(args, mqtt.MQTTv5, client_id=client_id, clean=False, properties=expiry, reconnect=False)
    flags, _ = new.expect_connected()
    expect(flags.session_present, "the taken-over session was not present")
    expect_equal(get(old.disconnects, "the old connection's DISCONNECT").value, 0x8E, "DISCONNECT reason to the old connection")
    expect_equal(watcher.receive("the old connection's will").payload, b"old one gone", "the will")
    publisher = Client(args, mqtt.MQTTv311)
    publisher.expect_connected()
    publisher.publish(topic + "/data", b"after the take-over", 1)
    message = new.receive("the message after the take-over")
    expect_equal((message.topic, message.payload, message.qos), (topic + "/data", b"after the take-over", 1), "delivery to the new connection")
    old.expect_quiet("on the old connection")
    new.close()
    old.client.loop_stop()

    # 3.1.1: an unacknowledged QoS 1 delivery of the old connection goes to the new one.
    client_id = unique("taken311")
    topic = "ferromq/%s" % client_id
    raw = Raw(args)
    raw.send(connect_packet(client_id, level=4, clean=False))
    expect_equal(raw.read_packet(), (0x20, b"\x00\x00"), "CONNACK to the raw 3.1.1 connection")
    raw.send(subscribe_packet(1, topic, 1))
    expect_equal(raw.read_packet(), (0x90, b"\x00\x01\x01"), "SUBACK to the raw connection")
    publisher.publish(topic, b"never acknowledged", 1)
    first, body = raw.read_packet()
    expect_equal(first & 0xF6, 0x32, "a QoS 1 PUBLISH to the raw connection")
    expect(b"never acknowledged" in body, "the raw connection's PUBLISH carries the message: %r" % body)
    new = Client(args, mqtt.MQTTv311, client_id=client_id, clean=False, reconnect=False)
    flags, _ = new.expect_connected()
    expect(flags.session_present, "the taken-over 3.1.1 session was not present")
    expect_equal(raw.expect_closed(), [], "packets to the taken-over 3.1.1 connection")
    raw.close()
    message = new.receive("the unacknowledged message, redelivered")
    expect_equal((message.payload, message.dup), (b"never acknowledged", True), "the redelivered message and its DUP")
    publisher.publish(topic, b"afterwards", 1)
    expect_equal(new.receive("the message after the 3.1.1 take-over").payload, b"afterwards", "delivery to the new 3.1.1 connection")
    new.close()
    publisher.close()

    # Other protocols keep ActiveMQ's rule: one connection per client id, no take-over.
    client_id = unique("stomp-held")
    connection, listener = stomp_connection(args, headers={"client-id": client_id})
    for level, expected in ((4, b"\x00\x02"), (5, b"\x00\x85")):
        raw = Raw(args)
        raw.send(connect_packet(client_id, level=level))
        first, body = raw.read_packet()
        expect_equal((first, body[:2]), (0x20, expected), "CONNACK to a client id STOMP holds (level %d)" % level)
        raw.expect_closed()
        raw.close()
    name = "/topic/%s" % unique("still")
    connection.subscribe(name, id="1", ack="auto", headers={"receipt": "still"})
    expect_equal(get(listener.receipts, "the STOMP holder's receipt"), "still", "the STOMP holder still serves")
    connection.disconnect()
    client_id = unique("mqtt-held")
    holder = Client(args, mqtt.MQTTv311, client_id=client_id, reconnect=False)
    holder.expect_connected()
    refused = False
    second = stomp.Connection12([(args.host, args.stomp_port)], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=WAIT_SECONDS)
    try:
        second.connect(wait=True, headers={"client-id": client_id})
        second.disconnect()
    except stomp.exception.ConnectFailedException:
        refused = True
    expect(refused, "a STOMP CONNECT with the client id of an MQTT connection succeeded")
    holder.expect_quiet("the MQTT holder after the STOMP refusal")
    expect(holder.disconnects.empty(), "the MQTT holder was disconnected by a STOMP CONNECT")
    holder.close()


# --- MQTT 5.0 sessions, shared subscriptions and limits -------------------------------------


def connect_v5_packet(client_id, clean=True, keep_alive=60, properties=b"", will=None, will_properties=b""):
    """A raw 5.0 CONNECT with encoded `properties` (and a QoS 1 will with `will_properties`)."""
    flags = 0x02 if clean else 0
    payload = string(client_id)
    if will is not None:
        topic, message = will
        flags |= 0x04 | (1 << 3)
        payload += variable_int(len(will_properties)) + will_properties + string(topic) + string(message)
    body = string("MQTT") + bytes([5, flags]) + struct.pack("!H", keep_alive)
    body += variable_int(len(properties)) + properties
    return packet(0x10, body + payload)


def u32_property(identifier, value):
    return bytes([identifier]) + struct.pack("!I", value)


def session_expiry(seconds):
    return u32_property(0x11, seconds)


def raw_v5(args, client_id, clean=True, properties=b"", will=None, will_properties=b""):
    """A raw 5.0 connection: the socket and the CONNACK's (session present, reason, body)."""
    raw = Raw(args)
    raw.send(connect_v5_packet(client_id, clean=clean, properties=properties, will=will, will_properties=will_properties))
    first, body = raw.read_packet()
    expect_equal(first, 0x20, "a CONNACK")
    return raw, bool(body[0] & 1), body[1], body


def v5_subscribe_packet(packet_id, topic_filter, options, properties=b""):
    """A 5.0 SUBSCRIBE of one filter with its options byte."""
    body = struct.pack("!H", packet_id) + variable_int(len(properties)) + properties
    return packet(0x82, body + string(topic_filter) + bytes([options]))


def parse_publish(first, body, version=5):
    """A PUBLISH's (topic, packet id or None, properties bytes, payload, dup, retain)."""
    length = struct.unpack("!H", body[:2])[0]
    topic = body[2 : 2 + length].decode()
    at = 2 + length
    qos = (first >> 1) & 3
    packet_id = None
    if qos:
        packet_id = struct.unpack("!H", body[at : at + 2])[0]
        at += 2
    properties = b""
    if version == 5:
        size, shift, start = 0, 0, at
        while True:
            byte = body[at]
            size |= (byte & 0x7F) << shift
            shift += 7
            at += 1
            if not byte & 0x80:
                break
        properties = body[at : at + size]
        at += size
    return topic, packet_id, properties, body[at:], bool(first & 0x08), bool(first & 1)


def read_publish(raw, what):
    while True:
        parsed = raw.read_packet()
        expect(parsed is not None, "%s: the broker closed the connection" % what)
        first, body = parsed
        if first >> 4 == 3:
            return first, body


def v5_client(args, client_id=None, clean=True, expiry=None):
    properties = None
    if expiry is not None:
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = expiry
    return Client(args, mqtt.MQTTv5, client_id=client_id, clean=clean, properties=properties)


def subscribe_v5(client, topic, qos, no_local=False, retain_as_published=False, identifier=None):
    options = mqtt.SubscribeOptions(qos=qos, noLocal=no_local, retainAsPublished=retain_as_published)
    properties = None
    if identifier is not None:
        properties = Properties(PacketTypes.SUBSCRIBE)
        properties.SubscriptionIdentifier = identifier
    result, mid = client.client.subscribe(topic, options=options, properties=properties)
    expect_equal(result, mqtt.MQTT_ERR_SUCCESS, "subscribe result")
    got_mid, codes = get(client.subacks, "SUBACK")
    expect_equal(got_mid, mid, "SUBACK packet id")
    return [code.value for code in codes]


def check_shared_subscriptions(args):
    """CONNACK says Shared Subscription Available 1; over 5.0 and 3.1.1 the members of
    `$share/{group}/{filter}` share the topic's messages, each to exactly one of them, while a
    plain subscriber gets them all; a second group gets them all too; a new member gets no
    retained message; invalid share names get SUBACK 0x8F (3.1.1: 0x80) and the connection
    stays; No Local on a shared subscription is DISCONNECT 0x82."""
    probe = Client(args, mqtt.MQTTv5)
    _, props = probe.expect_connected()
    expect_equal(getattr(props, "SharedSubscriptionAvailable", None), 1, "CONNACK Shared Subscription Available")
    probe.close()
    for name, version in VERSIONS.items():
        topic = "ferromq/%s" % unique("shared")
        publisher = Client(args, version)
        publisher.expect_connected()
        publisher.publish(topic + "/kept", b"retained", 1, retain=True)
        members = [Client(args, version) for _ in range(2)]
        for member in members:
            member.expect_connected()
            expect_equal(member.subscribe("$share/workers/%s/#" % topic, 1), [1], "%s: SUBACK of a member" % name)
        other_group = Client(args, version)
        other_group.expect_connected()
        other_group.subscribe("$share/auditors/%s/#" % topic, 1)
        plain = Client(args, version)
        plain.expect_connected()
        plain.subscribe(topic + "/#", 1)
        expect_equal(plain.receive("%s: the retained message of a plain subscription" % name).payload, b"retained", "%s: retained to a plain subscription" % name)
        for member in members + [other_group]:
            member.expect_quiet("%s: retained message to a new shared subscription" % name)
        sent = [b"job %d" % index for index in range(20)]
        for payload in sent:
            publisher.publish(topic + "/jobs", payload, 1)
        everything = sorted(plain.receive("%s: message to the plain subscriber" % name).payload for _ in sent)
        expect_equal(everything, sorted(sent), "%s: a plain subscriber's messages" % name)
        audited = sorted(other_group.receive("%s: message to the second group" % name).payload for _ in sent)
        expect_equal(audited, sorted(sent), "%s: the single member of a second group" % name)
        shares = []
        for member in members:
            got = []
            while True:
                try:
                    got.append(member.messages.get(timeout=QUIET_SECONDS).payload)
                except queue.Empty:
                    break
            shares.append(got)
        expect_equal(sorted(shares[0] + shares[1]), sorted(sent), "%s: each message to exactly one member" % name)
        expect(shares[0] and shares[1], "%s: the group's messages were not balanced: %r" % (name, [len(s) for s in shares]))
        # Invalid share names: the subscription is refused, the connection stays.
        refused = 0x8F if version == mqtt.MQTTv5 else 0x80
        for bad in ("$share//%s" % topic, "$share/+/%s" % topic, "$share/workers"):
            expect_equal(members[0].subscribe(bad, 1), [refused], "%s: SUBACK to %r" % (name, bad))
        # paho does not send a share name holding a wildcard in a level: raw bytes do.
        raw = Raw(args)
        if version == mqtt.MQTTv5:
            raw.send(connect_v5_packet(unique("raw")))
        else:
            raw.send(connect_packet(unique("raw")))
        expect_equal(raw.read_packet()[0], 0x20, "%s: CONNACK" % name)
        for packet_id, bad in enumerate(("$share/a+b/%s" % topic, "$share/g#/%s" % topic), start=1):
            if version == mqtt.MQTTv5:
                raw.send(v5_subscribe_packet(packet_id, bad, 0x01))
            else:
                raw.send(subscribe_packet(packet_id, bad, 1))
            first, body = raw.read_packet()
            expect_equal((first, body[-1]), (0x90, refused), "%s: SUBACK to %r" % (name, bad))
        raw.send(b"\xc0\x00")
        expect_equal(raw.read_packet()[0], 0xD0, "%s: PINGRESP after the refusals" % name)
        raw.close()
        publisher.publish(topic + "/jobs", b"after refusals", 1)
        expect_equal(plain.receive("%s: a message after the refusals" % name).payload, b"after refusals", "%s: after refusals" % name)
        publisher.publish(topic + "/kept", b"", 1, retain=True)
        for client in members + [other_group, plain, publisher]:
            client.close()
    raw = raw_v5_connected(args)
    raw.send(v5_subscribe_packet(1, "$share/g/ferromq/nolocal", 0x01 | 0x04))
    expect_disconnect(raw, 0x82, "No Local on a shared subscription")


def check_shared_redelivery(args):
    """A member that disconnects without acknowledging its QoS 1 messages has them
    redelivered to the other members; a group whose last (clean) member left is gone, its
    messages with it."""
    topic = "ferromq/%s" % unique("shared-redelivery")
    group = "$share/g/%s" % topic
    silent, _, reason, _ = raw_v5(args, unique("silent"))
    expect_equal(reason, 0, "CONNACK of the silent member")
    silent.send(v5_subscribe_packet(1, group, 0x01))
    first, body = silent.read_packet()
    expect_equal((first, body[-1:]), (0x90, b"\x01"), "SUBACK of the silent member")
    member = Client(args, mqtt.MQTTv5)
    member.expect_connected()
    member.subscribe(group, 1)
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    sent = [b"task %d" % index for index in range(6)]
    for payload in sent:
        publisher.publish(topic, payload, 1)
    held = []
    while True:
        try:
            first, body = silent.read_packet(timeout=QUIET_SECONDS)
        except CheckFailed:
            break
        if first >> 4 == 3:
            held.append(parse_publish(first, body)[3])
    expect(held, "the silent member got none of the group's messages")
    got = [member.receive("a message of the group").payload for _ in range(len(sent) - len(held))]
    silent.socket.shutdown(socket.SHUT_RDWR)
    silent.close()
    got += [member.receive("a message the silent member left").payload for _ in held]
    expect_equal(sorted(got), sorted(sent), "the messages of the group, the silent member's included")
    member.expect_quiet("after the redelivery")
    member.close()
    # The last member left: the group is gone, and a new member gets what comes from now on.
    publisher.publish(topic, b"nobody", 1)
    newcomer = Client(args, mqtt.MQTTv5)
    newcomer.expect_connected()
    newcomer.subscribe(group, 1)
    publisher.publish(topic, b"fresh", 1)
    expect_equal(newcomer.receive("the message after the group was made again").payload, b"fresh", "a new group")
    newcomer.expect_quiet("a message of the group that ended")
    newcomer.close()
    publisher.close()


def check_shared_persistent_member(args):
    """QoS 1 messages wait for the group while its persistent-session member (5.0 and 3.1.1)
    is away, and reach it when it comes back."""
    for name, version in VERSIONS.items():
        topic = "ferromq/%s" % unique("shared-away")
        client_id = unique("away")
        if version == mqtt.MQTTv5:
            member = v5_client(args, client_id, clean=True, expiry=300)
        else:
            member = Client(args, version, client_id=client_id, clean=False)
        member.expect_connected()
        member.subscribe("$share/g/%s" % topic, 1)
        member.close()
        publisher = Client(args, version)
        publisher.expect_connected()
        for index in range(3):
            publisher.publish(topic, b"waiting %d" % index, 1)
        if version == mqtt.MQTTv5:
            deadline = time.monotonic() + WAIT_SECONDS
            while True:
                again = v5_client(args, client_id, clean=False, expiry=300)
                if again.connack[1].value != 0x85 or time.monotonic() > deadline:
                    break
        else:
            again = connect_when_free(args, version, client_id, False)
        flags, _ = again.expect_connected()
        expect(flags.session_present, "%s: the member's session was not present" % name)
        got = sorted(again.receive("%s: a message kept for the group" % name).payload for _ in range(3))
        expect_equal(got, [b"waiting 0", b"waiting 1", b"waiting 2"], "%s: messages kept for the group" % name)
        again.close()
        clean = connect_when_free(args, version, client_id, True)
        clean.expect_connected()
        clean.close()
        publisher.close()


def reconnect_v5(args, client_id, clean, expiry):
    """A 5.0 client as `client_id` once the broker let the last connection with it go."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        client = v5_client(args, client_id, clean=clean, expiry=expiry)
        if client.connack[1].value not in (0x85,) or time.monotonic() > deadline:
            return client
        client.client.loop_stop()


def check_session_expiry_start(args):
    """A 5.0 session with a Session Expiry Interval of 2 s (client id --client-id) is
    present when its client comes back at once, with what was published meanwhile; then it
    is left to expire."""
    client_id = args.client_id
    topic = "ferromq/expiry/%s" % client_id
    first = v5_client(args, client_id, clean=True, expiry=2)
    first.expect_connected()
    first.subscribe(topic, 1)
    first.close()
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    publisher.publish(topic, b"while away", 1)
    again = reconnect_v5(args, client_id, False, 2)
    flags, _ = again.expect_connected()
    expect(flags.session_present, "the session was not present within its expiry interval")
    expect_equal(again.receive("the message kept by the session").payload, b"while away", "kept by the session")
    again.close()
    publisher.publish(topic, b"after the session", 1)
    publisher.close()


def check_session_expiry_gone(args):
    """After its expiry: the session of --client-id is not present and kept nothing."""
    client_id = args.client_id
    topic = "ferromq/expiry/%s" % client_id
    client = reconnect_v5(args, client_id, False, 0)
    flags, _ = client.expect_connected()
    expect(not flags.session_present, "the expired session was present")
    client.expect_quiet("a message kept by an expired session")
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    publisher.publish(topic, b"no subscription", 1)
    client.expect_quiet("a message to the expired session's subscription")
    publisher.close()
    client.close()


def check_session_expiry_disconnect(args):
    """A session expiry of 0 ends the session with the connection; a DISCONNECT may shorten
    a session's expiry to 0 (the session then ends) but not set one after CONNECT's 0
    (DISCONNECT 0x82); 0xFFFFFFFF keeps it."""
    topic = "ferromq/%s" % unique("disconnect-expiry")
    # Expiry 0: nothing kept.
    client_id = unique("zero")
    first = v5_client(args, client_id, expiry=0)
    first.expect_connected()
    first.subscribe(topic, 1)
    first.close()
    again = reconnect_v5(args, client_id, False, 0)
    flags, _ = again.expect_connected()
    expect(not flags.session_present, "a session with expiry 0 outlived its connection")
    again.close()
    # A DISCONNECT setting an expiry after CONNECT's 0.
    raw, _, _, _ = raw_v5(args, unique("raw"))
    properties = session_expiry(60)
    raw.send(packet(0xE0, b"\x00" + variable_int(len(properties)) + properties))
    expect_disconnect(raw, 0x82, "a DISCONNECT setting a session expiry after 0")
    # A DISCONNECT shortening 300 s to 0 ends the session.
    client_id = unique("shortened")
    raw, present, reason, _ = raw_v5(args, client_id, properties=session_expiry(300))
    expect_equal((present, reason), (False, 0), "CONNACK of a new session")
    raw.send(v5_subscribe_packet(1, topic, 0x01))
    expect_equal(raw.read_packet()[0], 0x90, "SUBACK")
    properties = session_expiry(0)
    raw.send(packet(0xE0, b"\x00" + variable_int(len(properties)) + properties))
    expect_equal(raw.expect_closed(), [], "packets after a DISCONNECT")
    raw.close()
    again = reconnect_v5(args, client_id, False, 0)
    flags, _ = again.expect_connected()
    expect(not flags.session_present, "the session outlived a DISCONNECT with expiry 0")
    again.close()
    # 0xFFFFFFFF: kept.
    client_id = unique("never")
    raw, _, _, _ = raw_v5(args, client_id, properties=session_expiry(0xFFFFFFFF))
    raw.send(v5_subscribe_packet(1, topic, 0x01))
    expect_equal(raw.read_packet()[0], 0x90, "SUBACK")
    raw.send(b"\xe0\x00")
    raw.expect_closed()
    raw.close()
    again = reconnect_v5(args, client_id, False, 0)
    flags, _ = again.expect_connected()
    expect(flags.session_present, "a session that never expires was not present")
    again.close()


def check_session_restart_before(args):
    """Before a restart: --client-id holds a session of 3600 s with a subscription with
    identifier 9, No Local and Retain As Published; --client-id + "-short" one of 2 s."""
    client_id = args.client_id
    topic = "ferromq/restart/%s" % client_id
    long_lived = v5_client(args, client_id, expiry=3600)
    long_lived.expect_connected()
    expect_equal(subscribe_v5(long_lived, topic, 1, no_local=True, retain_as_published=True, identifier=9), [1], "SUBACK")
    long_lived.close()
    short = v5_client(args, client_id + "-short", expiry=2)
    short.expect_connected()
    short.subscribe(topic, 1)
    short.close()


def check_resumed_options(args):
    """A resumed session (--client-id, made by session_restart_before or here) keeps its
    subscription's identifier, No Local and Retain As Published."""
    client_id = args.client_id or unique("options")
    topic = "ferromq/restart/%s" % client_id
    if not args.client_id:
        first = v5_client(args, client_id, expiry=300)
        first.expect_connected()
        subscribe_v5(first, topic, 1, no_local=True, retain_as_published=True, identifier=9)
        first.close()
    again = reconnect_v5(args, client_id, False, 300)
    flags, _ = again.expect_connected()
    expect(flags.session_present, "the session was not present")
    again.publish(topic, b"own", 1)
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    publisher.publish(topic, b"retained one", 1, retain=True)
    message = again.receive("a message of the resumed subscription")
    expect_equal(
        (message.payload, message.retain, getattr(message.properties, "SubscriptionIdentifier", None)),
        (b"retained one", True, [9]),
        "the resumed subscription's identifier and Retain As Published",
    )
    again.expect_quiet("the client's own message (No Local)")
    publisher.publish(topic, b"", 1, retain=True)
    again.receive("the clearing of the retained message")
    publisher.close()
    again.close()
    clean = reconnect_v5(args, client_id, True, 0)
    clean.close()


def check_session_restart_short_gone(args):
    """After the restart: the 2 s session of --client-id + "-short" expired."""
    args.client_id = args.client_id + "-short"
    check_session_expiry_gone(args)


def check_will_delay(args):
    """A 5.0 will with a Will Delay Interval is published after the delay, or when the
    session ends if that is sooner, and not at all if the client connects again first; with
    a session expiry of 0 at once."""
    topic = "ferromq/%s" % unique("will-delay")
    subscriber = Client(args, mqtt.MQTTv5)
    subscriber.expect_connected()
    subscriber.subscribe(topic + "/#", 1)

    def dropped(what, delay, expiry):
        client_id = unique(what)
        raw, _, reason, _ = raw_v5(
            args, client_id, properties=session_expiry(expiry), will=("%s/%s" % (topic, what), what), will_properties=u32_property(0x18, delay)
        )
        expect_equal(reason, 0, "CONNACK of a CONNECT with a delayed will")
        raw.socket.shutdown(socket.SHUT_RDWR)
        raw.close()
        return client_id, time.monotonic()

    _, dropped_at = dropped("delayed", 2, 60)
    subscriber.expect_quiet("the will before its delay")
    message = subscriber.receive("the will after its delay")
    expect_equal(message.payload, b"delayed", "the delayed will")
    expect(time.monotonic() - dropped_at >= 1.9, "the will came before its delay")
    _, dropped_at = dropped("session-ended", 300, 1)
    message = subscriber.receive("the will when the session ended")
    expect_equal(message.payload, b"session-ended", "the will of the ended session")
    expect(time.monotonic() - dropped_at < 60, "the will waited for its delay, not the session's end")
    _, dropped_at = dropped("at-once", 300, 0)
    message = subscriber.receive("the will of a session ending with its connection")
    expect_equal(message.payload, b"at-once", "the will of a session ending with its connection")
    client_id, _ = dropped("came-back", 2, 60)
    back = reconnect_v5(args, client_id, False, 60)
    back.expect_connected()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            message = subscriber.messages.get(timeout=0.2)
        except queue.Empty:
            continue
        raise CheckFailed("the will of a client that came back was published: %r" % message.payload)
    back.close()
    subscriber.close()


def check_enhanced_auth(args):
    """A CONNECT with an Authentication Method gets CONNACK 0x8C; an AUTH packet is a
    Protocol Error (DISCONNECT 0x82)."""
    properties = Properties(PacketTypes.CONNECT)
    properties.AuthenticationMethod = "SCRAM-SHA-1"
    client = Client(args, mqtt.MQTTv5, properties=properties, reconnect=False)
    _, rc, _ = client.connack
    expect_equal(rc.value, 0x8C, "CONNACK to an Authentication Method")
    client.client.loop_stop()
    raw = raw_v5_connected(args)
    raw.send(packet(0xF0, b"\x18\x00"))
    expect_disconnect(raw, 0x82, "an AUTH packet")


def check_receive_maximum(args):
    """The client's Receive Maximum (2) bounds its unacknowledged QoS 1 deliveries across
    both its subscriptions; each PUBACK lets one more through. CONNACK says the broker's
    Receive Maximum, 1024; one more unacknowledged QoS 2 PUBLISH is DISCONNECT 0x93."""
    topic = "ferromq/%s" % unique("receive-maximum")
    raw, _, reason, _ = raw_v5(args, unique("bounded"), properties=b"\x21\x00\x02")
    expect_equal(reason, 0, "CONNACK")
    raw.send(v5_subscribe_packet(1, topic + "/a", 0x01))
    expect_equal(raw.read_packet()[0], 0x90, "SUBACK a")
    raw.send(v5_subscribe_packet(2, topic + "/b", 0x01))
    expect_equal(raw.read_packet()[0], 0x90, "SUBACK b")
    publisher = Client(args, mqtt.MQTTv5)
    publisher.expect_connected()
    sent = []
    for index in range(3):
        for sub in ("a", "b"):
            payload = b"%s %d" % (sub.encode(), index)
            publisher.publish("%s/%s" % (topic, sub), payload, 1)
            sent.append(payload)
    got = []
    ids = []
    for _ in range(2):
        topic_name, packet_id, _, payload, _, _ = parse_publish(*read_publish(raw, "a delivery within the Receive Maximum"))
        got.append(payload)
        ids.append(packet_id)
    try:
        extra = raw.read_packet(timeout=QUIET_SECONDS)
    except CheckFailed:
        extra = None
    expect(extra is None, "a delivery past the Receive Maximum: %r" % (extra,))
    while len(got) < len(sent):
        raw.send(packet(0x40, struct.pack("!H", ids.pop(0))))
        _, packet_id, _, payload, _, _ = parse_publish(*read_publish(raw, "the delivery a PUBACK let through"))
        got.append(payload)
        ids.append(packet_id)
    expect_equal(sorted(got), sorted(sent), "the deliveries")
    for packet_id in ids:
        raw.send(packet(0x40, struct.pack("!H", packet_id)))
    raw.send(b"\xe0\x00")
    raw.close()
    # Retained messages handed to a new subscription wait for room too.
    for index in range(3):
        publisher.publish("%s/kept/%d" % (topic, index), b"kept %d" % index, 1, retain=True)
    raw, _, _, _ = raw_v5(args, unique("retained-bounded"), properties=b"\x21\x00\x01")
    raw.send(v5_subscribe_packet(1, topic + "/kept/#", 0x01))
    expect_equal(raw.read_packet()[0], 0x90, "SUBACK kept")
    kept = []
    for index in range(3):
        _, packet_id, _, payload, _, _ = parse_publish(*read_publish(raw, "retained message %d" % index))
        kept.append(payload)
        try:
            extra = raw.read_packet(timeout=QUIET_SECONDS)
        except CheckFailed:
            extra = None
        expect(extra is None, "a retained message past the Receive Maximum: %r" % (extra,))
        raw.send(packet(0x40, struct.pack("!H", packet_id)))
    expect_equal(sorted(kept), [b"kept 0", b"kept 1", b"kept 2"], "the retained messages")
    raw.send(b"\xe0\x00")
    raw.close()
    for index in range(3):
        publisher.publish("%s/kept/%d" % (topic, index), b"", 1, retain=True)
    publisher.close()
    raw, _, _, body = raw_v5(args, unique("flooding"))
    expect(b"\x21\x04\x00" in body, "CONNACK without Receive Maximum 1024: %r" % body)
    flood = b"".join(
        packet(0x34, string(topic + "/flood") + struct.pack("!H", packet_id) + b"\x00" + b"x") for packet_id in range(1, 1026)
    )
    raw.send(flood)
    packets = raw.expect_closed()
    expect(packets, "the broker closed without a DISCONNECT")
    expect_equal(packets[-1][0], 0xE0, "the last packet")
    expect_equal(packets[-1][1][:1], b"\x93", "the DISCONNECT's reason")
    raw.close()


CHECKS = {
    "shared_subscriptions": check_shared_subscriptions,
    "shared_redelivery": check_shared_redelivery,
    "shared_persistent_member": check_shared_persistent_member,
    "session_expiry_start": check_session_expiry_start,
    "session_expiry_gone": check_session_expiry_gone,
    "session_expiry_disconnect": check_session_expiry_disconnect,
    "session_restart_before": check_session_restart_before,
    "session_restart_short_gone": check_session_restart_short_gone,
    "resumed_options": check_resumed_options,
    "will_delay": check_will_delay,
    "enhanced_auth": check_enhanced_auth,
    "receive_maximum": check_receive_maximum,
    "retained": check_retained,
    "retain_options": check_retain_options,
    "retained_publish": check_retained_publish,
    "retained_after_restart": check_retained_after_restart,
    "take_over": check_take_over,
    "topic_aliases": check_topic_aliases,
    "subscription_identifiers": check_subscription_identifiers,
    "tls": check_tls,
    "properties_and_retain": check_properties_and_retain,
    "will": check_will,
    "connect_versions": check_connect_versions,
    "bad_password": check_bad_password,
    "pubsub_qos": check_pubsub_qos,
    "stomp_interop": check_stomp_interop,
    "keep_alive": check_keep_alive,
    "malformed": check_malformed,
    "authorization": check_authorization,
    "qos2_exactly_once": check_qos2_exactly_once,
    "persistent_session": check_persistent_session,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stomp-port", type=int)
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--ca", help="connect over TLS, trusting this CA certificate")
    parser.add_argument("--client-id", help="the client id of checks that span several runs (a restart)")
    parser.add_argument("--check", action="append", required=True, choices=sorted(CHECKS))
    args = parser.parse_args()
    print("paho-mqtt %s against %s:%d" % (mqtt.__version__ if hasattr(mqtt, "__version__") else "?", args.host, args.port), flush=True)
    for name in args.check:
        started = time.monotonic()
        try:
            CHECKS[name](args)
        except CheckFailed as failure:
            sys.stderr.write("FAIL %s: %s\n" % (name, failure))
            return 1
        except Exception:
            sys.stderr.write("FAIL %s: unexpected exception\n%s" % (name, traceback.format_exc()))
            return 1
        print("ok %s (%.2f s)" % (name, time.monotonic() - started), flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # paho's and stomp.py's network threads are daemons; leave without waiting for them.
    os._exit(code)
