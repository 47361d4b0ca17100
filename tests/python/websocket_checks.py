#!/usr/bin/env python3
"""Checks a running ferromq broker's WebSocket connector (ws:// or wss://) with real
third-party clients: stomp.py's WSStompConnection (STOMP over WebSocket, text and binary
messages), paho-mqtt with transport="websockets" (MQTT 3.1.1 and 5.0), and websocket-client
for the `amqp` subprotocol (Qpid Proton has no WebSocket transport). The cross-protocol checks
use the broker's plain STOMP and MQTT connectors too.

    websocket_checks.py --host 127.0.0.1 --ws-port P [--stomp-port P] [--mqtt-port P]
                        [--ca ca.pem [--cert client.pem --key client-key.pem]]
                        [--user U --password P] --check NAME [--check NAME ...]

Prints "ok NAME" for each check that passes; on the first failure prints "FAIL NAME: why" to
stderr and exits with status 1 (status 2 for bad arguments or a missing client). The Rust
tests in tests/tests/integration/websocket.rs run one check each.
"""

import argparse
import queue
import ssl
import sys
import traceback
import uuid

try:
    import paho.mqtt.client as mqtt
    import stomp
    import websocket
except ImportError:  # pragma: no cover - reported to the caller
    sys.stderr.write(
        "paho-mqtt, stomp.py or websocket-client is not installed for %s: run scripts/test, "
        "which creates .venv\n" % sys.executable
    )
    sys.exit(2)

# How long to wait for anything expected.
WAIT_SECONDS = 15.0

VERSIONS = {"3.1.1": mqtt.MQTTv311, "5.0": mqtt.MQTTv5}

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


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


def get(events, what, timeout=WAIT_SECONDS):
    try:
        return events.get(timeout=timeout)
    except queue.Empty:
        raise CheckFailed("no %s within %.0f s" % (what, timeout))


# --- STOMP -----------------------------------------------------------------------------------


class StompListener(stomp.ConnectionListener):
    def __init__(self):
        self.messages = queue.Queue()
        self.receipts = queue.Queue()
        self.errors = queue.Queue()

    def on_message(self, frame):
        self.messages.put(frame)

    def on_receipt(self, frame):
        self.receipts.put(frame.headers.get("receipt-id"))

    def on_error(self, frame):
        self.errors.put(frame)


def connected(connection, login=None, passcode=None):
    listener = StompListener()
    connection.set_listener("", listener)
    connection.connect(login, passcode, wait=True)
    return connection, listener


def stomp_over_websocket(args, binary=False, subprotocol=None, login=None, passcode=None):
    header = {"Sec-WebSocket-Protocol": subprotocol} if subprotocol else None
    connection = stomp.WSStompConnection(
        [(args.host, args.ws_port)],
        heartbeats=(0, 0),
        ws_path="/",
        header=header,
        binary_mode=binary,
        timeout=WAIT_SECONDS,
    )
    if args.ca:
        connection.set_ssl(for_hosts=[(args.host, args.ws_port)], ca_certs=args.ca)
        if args.cert:
            # stomp.py's WebSocket transport hands its SSL parameters to websocket-client as
            # `sslopt`, whose names for the client's certificate are certfile and keyfile
            # (set_ssl's cert_file and key_file would be ignored).
            params = connection.transport.get_ssl((args.host, args.ws_port))
            params.update(certfile=args.cert, keyfile=args.key)
    return connected(connection, login, passcode)


def stomp_over_tcp(args):
    expect(args.stomp_port, "this check needs --stomp-port")
    return connected(stomp.Connection12([(args.host, args.stomp_port)], heartbeats=(0, 0)))


def subscribed(connection, listener, destination):
    receipt = unique("sub")
    connection.subscribe(destination, id="1", ack="auto", headers={"receipt": receipt})
    expect_equal(get(listener.receipts, "the SUBSCRIBE's receipt"), receipt, "receipt")


def exchange_on_a_queue(connection, listener, body):
    """SEND to a queue and receive it back on the same connection."""
    destination = "/queue/%s" % unique("ws")
    subscribed(connection, listener, destination)
    connection.send(destination, body, headers={"receipt": "sent"})
    frame = get(listener.messages, "the message sent over WebSocket")
    expect_equal(frame.headers.get("destination"), destination, "destination")
    expect_equal(frame.body, body, "body")


# --- MQTT ------------------------------------------------------------------------------------


class MqttClient:
    """A paho client on its own network thread, its events in queues."""

    def __init__(self, host, port, version, websockets, ca=None, cert=None, key=None, login=None, expect_refusal=None):
        self.connacks = queue.Queue()
        self.messages = queue.Queue()
        self.subacks = queue.Queue()
        self.pubacks = queue.Queue()
        transport = "websockets" if websockets else "tcp"
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=unique("paho"), protocol=version, transport=transport
        )
        if websockets:
            self.client.ws_set_options(path="/")
        if ca:
            self.client.tls_set(ca_certs=ca, certfile=cert, keyfile=key)
        if login:
            self.client.username_pw_set(*login)
        self.client.on_connect = lambda c, u, flags, rc, props: self.connacks.put(rc)
        self.client.on_message = lambda c, u, message: self.messages.put(message)
        self.client.on_subscribe = lambda c, u, mid, rcs, props: self.subacks.put((mid, rcs))
        self.client.on_publish = lambda c, u, mid, rc, props: self.pubacks.put((mid, rc))
        self.client.connect(host, port, keepalive=60)
        self.client.loop_start()
        rc = get(self.connacks, "CONNACK")
        if expect_refusal is not None:
            self.client.loop_stop()
            expect_equal(rc.value, expect_refusal, "CONNACK's refusal code")
            return
        expect(not rc.is_failure, "CONNACK refused the connection: %s" % rc)

    def subscribe(self, topic, qos):
        result, mid = self.client.subscribe(topic, qos)
        expect_equal(result, mqtt.MQTT_ERR_SUCCESS, "subscribe result")
        got_mid, codes = get(self.subacks, "SUBACK")
        expect_equal(got_mid, mid, "SUBACK packet id")
        expect_equal([code.value for code in codes], [qos], "granted QoS")

    def publish(self, topic, payload, qos):
        info = self.client.publish(topic, payload, qos)
        got_mid, _ = get(self.pubacks, "PUBACK of message %d" % info.mid)
        expect_equal(got_mid, info.mid, "acknowledged packet id")

    def receive(self, what):
        return get(self.messages, what)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


def mqtt_over_websocket(args, version, login=None, expect_refusal=None):
    return MqttClient(
        args.host,
        args.ws_port,
        version,
        websockets=True,
        ca=args.ca,
        cert=args.cert,
        key=args.key,
        login=login,
        expect_refusal=expect_refusal,
    )


def mqtt_over_tcp(args, version):
    expect(args.mqtt_port, "this check needs --mqtt-port")
    return MqttClient(args.host, args.mqtt_port, version, websockets=False)


# --- checks ----------------------------------------------------------------------------------


def check_stomp_text(args):
    """stomp.py over ws:// without a subprotocol (text messages, served as STOMP): a message
    sent to a queue comes back; a SEND to a topic reaches a paho subscriber on the MQTT TCP
    connector."""
    connection, listener = stomp_over_websocket(args)
    exchange_on_a_queue(connection, listener, "over a websocket, in text")
    name = unique("cross")
    subscriber = mqtt_over_tcp(args, mqtt.MQTTv311)
    subscriber.subscribe("ferromq/%s/#" % name, 1)
    connection.send("/topic/ferromq.%s.out" % name, "from stomp over ws", headers={"persistent": "true"})
    message = subscriber.receive("the STOMP-over-WebSocket message on MQTT")
    expect_equal(
        (message.topic, message.payload, message.qos),
        ("ferromq/%s/out" % name, b"from stomp over ws", 1),
        "MQTT delivery of a STOMP-over-WebSocket message",
    )
    subscriber.close()
    connection.disconnect()


def check_stomp_binary(args):
    """stomp.py in binary mode, offering v12.stomp: the same exchange in binary messages."""
    connection, listener = stomp_over_websocket(args, binary=True, subprotocol="v12.stomp")
    exchange_on_a_queue(connection, listener, "binary mode")
    connection.disconnect()


def check_mqtt(args):
    """paho over ws:// (subprotocol mqtt), 3.1.1 and 5.0: a QoS 1 publish reaches a QoS 1
    subscriber over WebSocket, and a STOMP subscriber on the STOMP TCP connector."""
    name = unique("wsmqtt")
    stomp_connection, listener = stomp_over_tcp(args)
    subscribed(stomp_connection, listener, "/topic/ferromq.%s.>" % name)
    for label, version in VERSIONS.items():
        topic = "ferromq/%s/%s" % (name, label.replace(".", ""))
        subscriber = mqtt_over_websocket(args, version)
        subscriber.subscribe(topic, 1)
        publisher = mqtt_over_websocket(args, version)
        payload = ("mqtt %s over ws" % label).encode()
        publisher.publish(topic, payload, 1)
        message = subscriber.receive("the %s message over WebSocket" % label)
        expect_equal((message.topic, message.payload, message.qos), (topic, payload, 1), "%s delivery" % label)
        frame = get(listener.messages, "the %s message on STOMP" % label)
        expect_equal(frame.headers.get("destination"), "/topic/" + topic.replace("/", "."), "STOMP destination")
        expect_equal(frame.body, payload.decode(), "STOMP body")
        expect_equal(frame.headers.get("persistent"), "true", "QoS 1 is persistent")
        publisher.close()
        subscriber.close()
    stomp_connection.disconnect()


def websocket_url(args):
    return "%s://%s:%d/" % ("wss" if args.ca else "ws", args.host, args.ws_port)


def check_amqp(args):
    """websocket-client offering `amqp`: the broker echoes the subprotocol and answers the
    AMQP 1.0 protocol header with its own, in a binary message."""
    sslopt = None
    if args.ca:
        sslopt = {"ca_certs": args.ca}
        if args.cert:
            sslopt.update(certfile=args.cert, keyfile=args.key)
    ws = websocket.create_connection(
        websocket_url(args), subprotocols=["amqp"], timeout=WAIT_SECONDS, sslopt=sslopt
    )
    expect_equal(ws.getsubprotocol(), "amqp", "negotiated subprotocol")
    ws.send(AMQP_HEADER, opcode=websocket.ABNF.OPCODE_BINARY)
    opcode, data = ws.recv_data()
    expect_equal(opcode, websocket.ABNF.OPCODE_BINARY, "opcode of the broker's answer")
    expect_equal(data[:8], AMQP_HEADER, "the broker's protocol header")
    ws.close()


def check_wss(args):
    """Over wss://, trusting the test CA (and showing --cert if given): stomp.py and paho
    (5.0) each exchange a message, and the `amqp` subprotocol answers."""
    expect(args.ca, "the wss check needs --ca")
    connection, listener = stomp_over_websocket(args)
    exchange_on_a_queue(connection, listener, "over wss")
    connection.disconnect()
    client = mqtt_over_websocket(args, mqtt.MQTTv5)
    topic = "ferromq/%s" % unique("wss")
    client.subscribe(topic, 1)
    client.publish(topic, b"over wss", 1)
    message = client.receive("the message over wss")
    expect_equal((message.payload, message.qos), (b"over wss", 1), "MQTT message over wss")
    client.close()
    check_amqp(args)


def check_wss_without_certificate(args):
    """A wss:// connector with needClientAuth=true: stomp.py and paho, trusting the CA but
    showing no certificate of their own, do not get through the TLS handshake."""
    expect(args.ca and not args.cert, "this check needs --ca and no --cert")
    for name, attempt in (
        ("stomp.py", lambda: stomp_over_websocket(args)),
        ("paho", lambda: mqtt_over_websocket(args, mqtt.MQTTv5)),
    ):
        try:
            attempt()
        except (CheckFailed, ssl.SSLError, OSError, stomp.exception.StompException):
            continue
        raise CheckFailed("%s got in over wss:// without a client certificate" % name)


def check_login(args):
    """Authentication and authorization over ws://, as on the plain connectors: STOMP and
    MQTT (3.1.1 and 5.0) with the right password get in and exchange a message where the
    user may; a wrong or missing password is refused with each protocol's answer; a topic the
    user may not read gets a refused SUBSCRIBE (MQTT: SUBACK 0x80 / 0x87), the connection
    staying."""
    expect(args.user and args.password, "this check needs --user and --password")
    good = (args.user, args.password)
    connection, listener = stomp_over_websocket(args, login=args.user, passcode=args.password)
    destination = "/queue/ws.open.%s" % unique("login")
    subscribed(connection, listener, destination)
    connection.send(destination, "logged in over ws")
    expect_equal(get(listener.messages, "the message").body, "logged in over ws", "body")
    connection.disconnect()
    try:
        stomp_over_websocket(args, login=args.user, passcode="wrong")
    except stomp.exception.StompException:
        pass
    else:
        raise CheckFailed("a wrong STOMP passcode over ws:// got in")
    # 3.1.1 refuses a bad user name or password with 4, which paho reports as 5.0's 0x86.
    mqtt_over_websocket(args, mqtt.MQTTv311, login=(args.user, "wrong"), expect_refusal=0x86)
    mqtt_over_websocket(args, mqtt.MQTTv5, login=(args.user, "wrong"), expect_refusal=0x86)
    for version in (mqtt.MQTTv311, mqtt.MQTTv5):
        client = mqtt_over_websocket(args, version, login=good)
        topic = "ws/open/%s" % unique("mqtt")
        client.subscribe(topic, 1)
        client.publish(topic, b"allowed", 1)
        expect_equal(client.receive("the allowed message").payload, b"allowed", "payload")
        result, mid = client.client.subscribe("ws/secret/%s" % unique("denied"), 1)
        expect_equal(result, mqtt.MQTT_ERR_SUCCESS, "subscribe result")
        got_mid, codes = get(client.subacks, "SUBACK of the refused subscription")
        expect_equal(got_mid, mid, "SUBACK packet id")
        expect(codes[0].value >= 0x80, "a subscription to a secret topic was granted: %r" % codes)
        # Still connected: another message goes through.
        client.publish(topic, b"still here", 1)
        expect_equal(client.receive("the message after the refusal").payload, b"still here", "payload")
        client.close()


CHECKS = {
    "stomp_text": check_stomp_text,
    "stomp_binary": check_stomp_binary,
    "mqtt": check_mqtt,
    "amqp": check_amqp,
    "wss": check_wss,
    "wss_without_certificate": check_wss_without_certificate,
    "login": check_login,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ws-port", type=int, required=True)
    parser.add_argument("--stomp-port", type=int)
    parser.add_argument("--mqtt-port", type=int)
    parser.add_argument("--ca", help="the CA to trust: connect with wss://")
    parser.add_argument("--cert", help="the client certificate to show over wss://")
    parser.add_argument("--key", help="the client certificate's key")
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--check", action="append", choices=sorted(CHECKS), required=True)
    args = parser.parse_args()
    for name in args.check:
        try:
            CHECKS[name](args)
        except Exception as error:  # noqa: BLE001 - every failure is reported the same way
            sys.stderr.write("FAIL %s: %s\n" % (name, error))
            traceback.print_exc()
            sys.exit(1)
        print("ok %s" % name, flush=True)


if __name__ == "__main__":
    main()
