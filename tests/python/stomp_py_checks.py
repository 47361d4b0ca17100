#!/usr/bin/env python3
"""Checks a running ferromq broker through stomp.py, a real third-party STOMP client.

    stomp_py_checks.py --host 127.0.0.1 --port 61613 [--check NAME ...] [--list]

Without --check every check runs. Each check uses its own queues, so checks may share a
broker. Prints "ok NAME" for each check that passes; on the first failure prints
"FAIL NAME: why" to stderr and exits with status 1 (status 2 for bad arguments or a missing
stomp.py). The Rust tests in tests/tests/integration/stomp_py.rs run one check each.
"""

import argparse
import os
import sys
import threading
import time
import traceback
import uuid

try:
    import stomp
except ImportError:  # pragma: no cover - reported to the caller
    sys.stderr.write(
        "stomp.py is not installed for %s: run scripts/test, which creates .venv\n" % sys.executable
    )
    sys.exit(2)

# How long to wait for any one expected frame.
WAIT_SECONDS = 20.0
# How long to watch for frames that must not arrive.
QUIET_SECONDS = 0.5

VERSIONS = {
    "1.0": stomp.Connection10,
    "1.1": stomp.Connection11,
    "1.2": stomp.Connection12,
}


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def expect_equal(actual, expected, what):
    if actual != expected:
        raise CheckFailed("%s: expected %s, got %s" % (what, shorten(expected), shorten(actual)))


def shorten(value, limit=200):
    text = repr(value)
    if len(text) > limit:
        return "%s... (%d characters)" % (text[:limit], len(text))
    return text


class Collector(stomp.ConnectionListener):
    """Collects every MESSAGE, RECEIPT and ERROR frame a connection receives."""

    def __init__(self, name):
        self.name = name
        self.condition = threading.Condition()
        self.messages = []
        self.receipts = []
        self.errors = []
        self.disconnected = False

    def on_message(self, frame):
        with self.condition:
            self.messages.append(frame)
            self.condition.notify_all()

    def on_receipt(self, frame):
        with self.condition:
            self.receipts.append(frame.headers.get("receipt-id"))
            self.condition.notify_all()

    def on_error(self, frame):
        with self.condition:
            self.errors.append(frame)
            self.condition.notify_all()

    def on_disconnected(self):
        with self.condition:
            self.disconnected = True
            self.condition.notify_all()

    def _raise_on_error(self):
        if self.errors:
            frame = self.errors[0]
            raise CheckFailed(
                "%s: the broker sent ERROR: message=%r headers=%r body=%s"
                % (self.name, frame.headers.get("message"), frame.headers, shorten(frame.body))
            )

    def wait_until(self, predicate, what, timeout=WAIT_SECONDS):
        deadline = time.monotonic() + timeout
        with self.condition:
            while True:
                self._raise_on_error()
                if predicate():
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CheckFailed(
                        "%s: timed out after %.0f s waiting for %s (have %d messages, receipts %r%s)"
                        % (
                            self.name,
                            timeout,
                            what,
                            len(self.messages),
                            self.receipts,
                            ", connection closed" if self.disconnected else "",
                        )
                    )
                if self.disconnected:
                    raise CheckFailed(
                        "%s: the connection closed while waiting for %s (have %d messages)"
                        % (self.name, what, len(self.messages))
                    )
                self.condition.wait(min(remaining, 0.1))

    def wait_messages(self, count, timeout=WAIT_SECONDS):
        self.wait_until(lambda: len(self.messages) >= count, "%d messages" % count, timeout)
        return list(self.messages[:count])

    def wait_receipt(self, receipt, timeout=WAIT_SECONDS):
        self.wait_until(lambda: receipt in self.receipts, "RECEIPT %s" % receipt, timeout)

    def expect_no_more_messages(self, count):
        """Waits QUIET_SECONDS and fails if more than `count` messages arrived."""
        time.sleep(QUIET_SECONDS)
        with self.condition:
            self._raise_on_error()
            if len(self.messages) > count:
                extra = self.messages[count:]
                raise CheckFailed(
                    "%s: expected exactly %d messages, got %d; the extra ones: %s"
                    % (self.name, count, len(self.messages), shorten([m.body for m in extra]))
                )


class Client:
    """A stomp.py connection with its collector."""

    def __init__(self, args, name, version="1.2", auto_decode=True, auto_content_length=True, client_id=None):
        self.version = version
        self.listener = Collector(name)
        self.connection = VERSIONS[version](
            host_and_ports=[(args.host, args.port)],
            reconnect_attempts_max=1,
            timeout=WAIT_SECONDS,
            auto_decode=auto_decode,
            auto_content_length=auto_content_length,
        )
        self.connection.set_listener("collector", self.listener)
        # ActiveMQ's JMS client id, which durable subscriptions need.
        headers = {"client-id": client_id} if client_id else {}
        self.connection.connect(wait=True, headers=headers)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.connection.is_connected():
            try:
                if exc_type is None:
                    self.disconnect()
                else:
                    self.connection.disconnect()
            except Exception:
                pass

    def disconnect(self):
        """DISCONNECT with a receipt and wait for it, so the broker handled every frame before."""
        receipt = "disconnect-%s" % uuid.uuid4()
        self.connection.disconnect(receipt=receipt)
        # stomp.py waits for the receipt and the socket's close before returning.
        expect(not self.connection.is_connected(), "%s: still connected after DISCONNECT" % self.listener.name)

    def send(self, destination, body, **headers):
        self.connection.send(destination=destination, body=body, headers=headers)

    def subscribe(self, destination, sub_id, ack="auto", **headers):
        receipt = "subscribe-%s" % uuid.uuid4()
        if self.version == "1.0":
            self.connection.subscribe(destination=destination, id=sub_id, ack=ack, receipt=receipt, headers=headers)
        else:
            self.connection.subscribe(destination, sub_id, ack=ack, receipt=receipt, headers=headers)
        self.listener.wait_receipt(receipt)

    @property
    def messages(self):
        return self.listener.messages

    def request(self, method, *args, **headers):
        """Calls connection.METHOD(*args, receipt=..., **headers) and waits for the RECEIPT."""
        receipt = "%s-%s" % (method, uuid.uuid4())
        getattr(self.connection, method)(*args, receipt=receipt, **headers)
        self.listener.wait_receipt(receipt)

    def ack(self, frame, transaction=None):
        """ACK (STOMP 1.2) with a receipt, waiting for it."""
        receipt = "ack-%s" % uuid.uuid4()
        self.connection.ack(frame.headers["ack"], transaction=transaction, receipt=receipt)
        self.listener.wait_receipt(receipt)

    def messages_of(self, sub_id):
        with self.listener.condition:
            return [m for m in self.listener.messages if m.headers.get("subscription") == sub_id]

    def wait_messages_of(self, sub_id, count):
        self.listener.wait_until(lambda: len(self.messages_of(sub_id)) >= count, "%d messages on %s" % (count, sub_id))
        return self.messages_of(sub_id)[:count]

    def wait_error(self, what):
        """Waits for an ERROR frame (and does not treat it as a failure); returns it."""
        deadline = time.monotonic() + WAIT_SECONDS
        with self.listener.condition:
            while not self.listener.errors:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CheckFailed("%s: no ERROR frame for %s" % (self.listener.name, what))
                self.listener.condition.wait(min(remaining, 0.1))
            return self.listener.errors[0]


def queue_name(check):
    return "/queue/stomp_py.%s.%s" % (check, uuid.uuid4().hex[:12])


def topic_name(check):
    return "/topic/stomp_py.%s.%s" % (check, uuid.uuid4().hex[:12])


def expect_silence(client, sub_id, count):
    """Waits QUIET_SECONDS and fails if subscription `sub_id` got more than `count` messages."""
    time.sleep(QUIET_SECONDS)
    client.listener._raise_on_error()
    got = client.messages_of(sub_id)
    if len(got) > count:
        raise CheckFailed(
            "%s: expected exactly %d messages on %s, got %d; the extra ones: %s"
            % (client.listener.name, count, sub_id, len(got), shorten([m.body for m in got[count:]]))
        )


def bodies(frames):
    return [frame.body for frame in frames]


# ---------------------------------------------------------------------------------------------
# Checks


def check_ordering(args):
    """100 messages arrive in the order they were sent, with each STOMP version."""
    for version in ("1.0", "1.1", "1.2"):
        queue = queue_name("ordering")
        expected = ["message %03d" % i for i in range(100)]
        # Without content-length: text bodies ended by the NUL byte.
        with Client(args, "ordering %s producer" % version, version, auto_content_length=False) as producer:
            for body in expected:
                producer.send(queue, body)
        with Client(args, "ordering %s consumer" % version, version) as consumer:
            consumer.subscribe(queue, "ordering-sub")
            received = consumer.listener.wait_messages(100)
            expect_equal(bodies(received), expected, "STOMP %s message order" % version)
            consumer.listener.expect_no_more_messages(100)
            for frame in received:
                expect_equal(frame.headers.get("destination"), queue, "STOMP %s destination header" % version)
                expect_equal(frame.headers.get("subscription"), "ordering-sub", "STOMP %s subscription header" % version)
                expect(frame.headers.get("message-id"), "STOMP %s MESSAGE without message-id" % version)
            ids = [frame.headers["message-id"] for frame in received]
            expect_equal(len(set(ids)), 100, "STOMP %s distinct message-id values" % version)


def check_custom_headers(args):
    """Headers a producer sets come back on the MESSAGE: properties and the JMS headers."""
    queue = queue_name("custom_headers")
    reply_to = queue_name("custom_headers_reply")
    sent = {
        "colour": "blue",
        "x-count": "42",
        "x-empty": "",
        "x-unicode": "gr\u00fc\u00dfe \u2713",
        "correlation-id": "corr-1",
        "reply-to": reply_to,
        "type": "greeting",
        "priority": "7",
        "persistent": "true",
        "JMSXGroupID": "group-a",
    }
    with Client(args, "custom_headers") as client:
        client.subscribe(queue, "headers-sub")
        client.send(queue, "with headers", **sent)
        (frame,) = client.listener.wait_messages(1)
        expect_equal(frame.body, "with headers", "body")
        for name, value in sent.items():
            expect_equal(frame.headers.get(name), value, "header %s" % name)
        expect_equal(frame.headers.get("redelivered"), "false", "header redelivered")
        expect(frame.headers.get("timestamp", "").isdigit(), "timestamp header missing or not a number: %r" % frame.headers.get("timestamp"))


def check_client_individual_acks(args):
    """client-individual: 5 received, 2 acked, then the connection ends (with DISCONNECT, and
    again by closing the socket); a new connection gets exactly the 3 unacked ones, in order,
    marked redelivered."""
    for how in ("DISCONNECT", "socket close"):
        client_individual_round(args, how)


def client_individual_round(args, how):
    name = "client_individual (%s)" % how
    queue = queue_name("client_individual_acks")
    expected = ["individual %d" % i for i in range(5)]
    with Client(args, "%s producer" % name) as producer:
        for body in expected:
            producer.send(queue, body)

    first = Client(args, "%s first consumer" % name)
    try:
        first.subscribe(queue, "ci-sub", ack="client-individual")
        received = first.listener.wait_messages(5)
        first.listener.expect_no_more_messages(5)
        expect_equal(bodies(received), expected, "%s: first delivery order" % name)
        for frame in received:
            expect_equal(frame.headers.get("redelivered"), "false", "%s: redelivered header on first delivery" % name)
            expect(
                frame.headers.get("ack"),
                "%s: STOMP 1.2 MESSAGE for a client-individual subscription without an ack header: %r"
                % (name, frame.headers),
            )
        # Ack the second and the fourth only.
        for index in (1, 3):
            first.connection.ack(received[index].headers["ack"])
        if how == "DISCONNECT":
            first.disconnect()
        else:
            first.connection.transport.disconnect_socket()
    finally:
        if first.connection.is_connected():
            first.connection.disconnect()

    with Client(args, "%s second consumer" % name) as second:
        second.subscribe(queue, "ci-sub-2", ack="client-individual")
        again = second.listener.wait_messages(3)
        second.listener.expect_no_more_messages(3)
        expect_equal(bodies(again), [expected[0], expected[2], expected[4]], "%s: redelivered messages" % name)
        for frame in again:
            expect_equal(frame.headers.get("redelivered"), "true", "%s: redelivered header of %r" % (name, frame.body))
        for frame in again:
            second.connection.ack(frame.headers["ack"], receipt="ack-%s" % frame.headers["ack"])
        for frame in again:
            second.listener.wait_receipt("ack-%s" % frame.headers["ack"])

    with Client(args, "%s third consumer" % name) as third:
        third.subscribe(queue, "ci-sub-3", ack="client-individual")
        third.listener.expect_no_more_messages(0)


def binary_payloads():
    return [
        b"\x00",
        b"\x00\x00\x00",
        b"before\x00after",
        b"\x00leading and trailing\x00",
        bytes(range(256)),
        b"\xff\xfe not utf-8 \x80\x00",
        b"\n\n\x00\r\n",
    ]


def check_binary_bodies(args):
    """Bodies with NUL bytes (and bytes that are not UTF-8) survive under content-length."""
    queue = queue_name("binary_bodies")
    payloads = binary_payloads()
    for version in ("1.1", "1.2"):
        with Client(args, "binary_bodies %s" % version, version, auto_decode=False) as client:
            sub = "binary-%s" % version
            client.subscribe(queue, sub)
            before = len(client.messages)
            for payload in payloads:
                client.send(queue, payload)
            received = client.listener.wait_messages(before + len(payloads))[before:]
            for payload, frame in zip(payloads, received):
                expect_equal(frame.body, payload, "STOMP %s binary body" % version)
                expect_equal(frame.headers.get("content-length"), str(len(payload)), "STOMP %s content-length header" % version)


def check_escaped_headers(args):
    """STOMP 1.2 (and 1.1) header escaping: values with ':', newline and backslash (and, in
    1.2, carriage return) come back exactly."""
    cases = {
        "1.2": {
            "x-colon": "a:b:c",
            "x-newline": "line one\nline two",
            "x-backslash": "C:\\path\\to\\file",
            "x-all": "k:v\\n\n\\c:",
            "x-carriage-return": "one\rtwo",
            "x-url": "http://example.com:8080/a?b=c",
        },
        "1.1": {
            "x-colon": "a:b:c",
            "x-newline": "line one\nline two",
            "x-backslash": "C:\\path\\to\\file",
            "x-all": "k:v\\n\n\\c:",
        },
    }
    for version, headers in cases.items():
        queue = queue_name("escaped_headers")
        with Client(args, "escaped_headers %s" % version, version) as client:
            client.subscribe(queue, "escaped-sub")
            # stomp.py escapes the values it is given, so pass copies.
            client.send(queue, "escaped", **dict(headers))
            (frame,) = client.listener.wait_messages(1)
            for name, value in headers.items():
                expect_equal(frame.headers.get(name), value, "STOMP %s header %s" % (version, name))
            expect_equal(frame.headers.get("destination"), queue, "STOMP %s destination" % version)


def check_large_body(args):
    """A 2 MiB body arrives whole, byte for byte."""
    queue = queue_name("large_body")
    size = 2 * 1024 * 1024
    payload = bytes((i * 31 + (i >> 8)) % 256 for i in range(size))
    with Client(args, "large_body", auto_decode=False) as client:
        client.subscribe(queue, "large-sub")
        client.send(queue, payload, receipt="large-send", persistent="true")
        client.listener.wait_receipt("large-send")
        (frame,) = client.listener.wait_messages(1)
        expect_equal(frame.headers.get("content-length"), str(size), "content-length header")
        expect_equal(len(frame.body), size, "body length")
        expect(frame.body == payload, "the 2 MiB body differs from what was sent")
    # A text body of the same size, without content-length.
    text = "0123456789abcdef" * (size // 16)
    with Client(args, "large_body text producer", auto_content_length=False) as producer:
        producer.send(queue, text, receipt="large-text")
        producer.listener.wait_receipt("large-text")
    with Client(args, "large_body text consumer", auto_decode=False) as client:
        client.subscribe(queue, "large-sub-2")
        (frame,) = client.listener.wait_messages(1)
        client.listener.expect_no_more_messages(1)
        expect_equal(len(frame.body), size, "text body length")
        expect(frame.body == text.encode(), "the 2 MiB text body differs from what was sent")


def check_receipts(args):
    """Persistent sends with receipts: each RECEIPT arrives, in request order, and the
    messages are delivered as persistent."""
    queue = queue_name("receipts")
    with Client(args, "receipts") as client:
        count = 20
        for i in range(count):
            client.send(queue, "receipted %d" % i, receipt="send-%d" % i, persistent="true")
        client.listener.wait_until(lambda: len(client.listener.receipts) >= count, "%d receipts" % count)
        expect_equal(client.listener.receipts, ["send-%d" % i for i in range(count)], "receipt order")
        client.subscribe(queue, "receipts-sub", ack="client-individual")
        received = client.listener.wait_messages(count)
        expect_equal(bodies(received), ["receipted %d" % i for i in range(count)], "bodies")
        for frame in received:
            expect_equal(frame.headers.get("persistent"), "true", "persistent header")
        for i, frame in enumerate(received):
            client.connection.ack(frame.headers["ack"], receipt="ack-%d" % i)
        client.listener.wait_until(
            lambda: all("ack-%d" % i in client.listener.receipts for i in range(count)), "the ACK receipts"
        )
        # A non-persistent send with a receipt is answered too.
        client.send(queue, "not persistent", receipt="send-np")
        client.listener.wait_receipt("send-np")
        (frame,) = client.listener.wait_messages(count + 1)[count:]
        # ActiveMQ sends the header only for persistent messages.
        expect_equal(frame.headers.get("persistent"), None, "persistent header of a plain send")
        client.connection.ack(frame.headers["ack"])


def check_nack(args):
    """STOMP 1.2 NACK: the nacked message comes back, marked redelivered; the others do not."""
    queue = queue_name("nack")
    expected = ["nack %d" % i for i in range(3)]
    with Client(args, "nack") as client:
        for body in expected:
            client.send(queue, body, persistent="true")
        client.subscribe(queue, "nack-sub", ack="client-individual")
        received = client.listener.wait_messages(3)
        expect_equal(bodies(received), expected, "first delivery")
        client.connection.ack(received[0].headers["ack"])
        client.connection.nack(received[1].headers["ack"], receipt="nack-1")
        client.listener.wait_receipt("nack-1")
        (again,) = client.listener.wait_messages(4)[3:]
        expect_equal(again.body, expected[1], "body of the message delivered after NACK")
        expect_equal(again.headers.get("redelivered"), "true", "redelivered header after NACK")
        client.listener.expect_no_more_messages(4)
        client.connection.ack(received[2].headers["ack"])
        client.connection.ack(again.headers["ack"], receipt="ack-again")
        client.listener.wait_receipt("ack-again")
    with Client(args, "nack afterwards") as client:
        client.subscribe(queue, "nack-sub-2", ack="client-individual")
        client.listener.expect_no_more_messages(0)


def check_topic_fanout(args):
    """Every topic subscriber gets every message, in order; a late subscriber gets only what
    is published after it subscribed."""
    topic = topic_name("topic_fanout")
    subscribers = [Client(args, "topic_fanout subscriber %d" % i) for i in range(3)]
    try:
        for index, subscriber in enumerate(subscribers):
            ack = ("auto", "client-individual", "client")[index]
            subscriber.subscribe(topic, "fanout-%d" % index, ack=ack)
        expected = ["fanout %d" % i for i in range(20)]
        with Client(args, "topic_fanout producer") as producer:
            for i, body in enumerate(expected):
                headers = {"persistent": "true"} if i % 2 == 0 else {}
                producer.send(topic, body, receipt="fanout-send-%d" % i, **headers)
            producer.listener.wait_receipt("fanout-send-%d" % (len(expected) - 1))
            for index, subscriber in enumerate(subscribers):
                received = subscriber.listener.wait_messages(len(expected))
                subscriber.listener.expect_no_more_messages(len(expected))
                expect_equal(bodies(received), expected, "subscriber %d message order" % index)
                for frame in received:
                    expect_equal(frame.headers.get("destination"), topic, "destination header")
            with Client(args, "topic_fanout late subscriber") as late:
                late.subscribe(topic, "fanout-late")
                late.listener.expect_no_more_messages(0)
                producer.send(topic, "late", receipt="fanout-late-send")
                producer.listener.wait_receipt("fanout-late-send")
                (frame,) = late.listener.wait_messages(1)
                expect_equal(frame.body, "late", "late subscriber's message")
                late.listener.expect_no_more_messages(1)
    finally:
        for subscriber in subscribers:
            subscriber.__exit__(None, None, None)


def check_durable_offline(args):
    """A durable subscriber (client-id + activemq.subscriptionName) gets, on reconnecting,
    what was published while it was offline; UNSUBSCRIBE with activemq.subscriptionName
    removes the subscription and what it held."""
    topic = topic_name("durable_offline")
    client_id = "stomp-py-%s" % uuid.uuid4().hex[:12]
    durable = {"activemq.subscriptionName": "offline"}
    with Client(args, "durable_offline first", client_id=client_id) as subscriber:
        subscriber.subscribe(topic, "durable-1", ack="client-individual", **durable)
    expected = ["p0", "n0", "p1", "n1"]
    with Client(args, "durable_offline producer") as producer:
        for body in expected:
            headers = {"persistent": "true"} if body.startswith("p") else {}
            producer.request("send", topic, body, **headers)
    with Client(args, "durable_offline second", client_id=client_id) as subscriber:
        subscriber.subscribe(topic, "durable-2", ack="client-individual", **durable)
        received = subscriber.listener.wait_messages(len(expected))
        subscriber.listener.expect_no_more_messages(len(expected))
        expect_equal(bodies(received), expected, "messages kept while offline")
        for frame in received:
            expect_equal(frame.headers.get("redelivered"), "false", "redelivered header of %r" % frame.body)
        subscriber.ack(received[0])
        subscriber.ack(received[2])
    with Client(args, "durable_offline producer 2") as producer:
        producer.request("send", topic, "while away again", persistent="true")
    with Client(args, "durable_offline third", client_id=client_id) as subscriber:
        subscriber.subscribe(topic, "durable-3", ack="client-individual", **durable)
        received = subscriber.listener.wait_messages(3)
        subscriber.listener.expect_no_more_messages(3)
        expect_equal(bodies(received), ["n0", "n1", "while away again"], "unacknowledged and new messages")
        expect_equal([f.headers.get("redelivered") for f in received], ["true", "true", "false"], "redelivered headers")
        # End the subscription for good, the ActiveMQ way.
        subscriber.request("unsubscribe", "durable-3", headers=dict(durable))
    with Client(args, "durable_offline producer 3") as producer:
        producer.request("send", topic, "nobody hears this", persistent="true")
    with Client(args, "durable_offline fourth", client_id=client_id) as subscriber:
        subscriber.subscribe(topic, "durable-4", ack="client-individual", **durable)
        subscriber.listener.expect_no_more_messages(0)
        subscriber.request("unsubscribe", "durable-4", headers=dict(durable))


def check_wildcards(args):
    """Topic wildcards (* one level, > the rest, none included, as in ActiveMQ 5.17) match what
    they should and nothing else; a
    queue wildcard consumer receives from every matching queue, new ones included, and its
    acks reach each queue; a SEND to a wildcard name is an ERROR."""
    base = "stomp_py.wildcards.%s" % uuid.uuid4().hex[:12]
    with Client(args, "wildcards consumer") as consumer:
        consumer.subscribe("/topic/%s.PRICE.*.IBM" % base, "star")
        consumer.subscribe("/topic/%s.PRICE.>" % base, "rest")
        with Client(args, "wildcards producer") as producer:
            for suffix in ("PRICE.STOCK.IBM", "PRICE.IBM", "PRICE.STOCK.NYSE.IBM", "PRICE", "PRICES.IBM"):
                producer.request("send", "/topic/%s.%s" % (base, suffix), suffix)
        star = consumer.wait_messages_of("star", 1)
        rest = consumer.wait_messages_of("rest", 4)
        expect_silence(consumer, "star", 1)
        expect_silence(consumer, "rest", 4)
        expect_equal(bodies(star), ["PRICE.STOCK.IBM"], "PRICE.*.IBM matches")
        expect_equal(bodies(rest), ["PRICE.STOCK.IBM", "PRICE.IBM", "PRICE.STOCK.NYSE.IBM", "PRICE"], "PRICE.> matches")

    orders = "/queue/%s.ORDERS" % base
    with Client(args, "wildcards queue producer") as producer:
        producer.request("send", orders + ".EU", "eu", persistent="true")
        with Client(args, "wildcards queue consumer") as consumer:
            consumer.subscribe(orders + ".>", "orders", ack="client-individual")
            (eu,) = consumer.wait_messages_of("orders", 1)
            # A queue created after the subscription.
            producer.request("send", orders + ".US", "us", persistent="true")
            producer.request("send", orders + "X.EU", "not matching", persistent="true")
            received = consumer.wait_messages_of("orders", 2)
            expect_silence(consumer, "orders", 2)
            expect_equal(bodies(received), ["eu", "us"], "ORDERS.> messages")
            expect_equal(received[1].headers.get("destination"), orders + ".US", "destination header")
            for frame in received:
                consumer.ack(frame)
        with Client(args, "wildcards queue check") as check:
            check.subscribe(orders + ".EU", "eu-check")
            check.subscribe(orders + ".US", "us-check")
            check.subscribe(orders + "X.EU", "plain-check")
            check.wait_messages_of("plain-check", 1)
            expect_silence(check, "eu-check", 0)
            expect_silence(check, "us-check", 0)

    producer = Client(args, "wildcards bad producer")
    try:
        producer.connection.send(destination=orders + ".*", body="refused", headers={"receipt": "bad-send"})
        error = producer.wait_error("a SEND to a wildcard queue")
        expect("wildcard" in (error.headers.get("message") or ""), "ERROR message: %r" % error.headers)
        expect_equal(error.headers.get("receipt-id"), "bad-send", "receipt-id of the ERROR")
    finally:
        try:
            if producer.connection.is_connected():
                producer.connection.disconnect()
        except Exception:
            pass


def check_virtual_topic_groups(args):
    """Virtual topic VirtualTopic.X: two consumers of Consumer.A.VirtualTopic.X share its
    messages (each once within the group), the Consumer.B queue and a plain topic subscriber
    each get every message."""
    name = "VirtualTopic.stomp_py.%s" % uuid.uuid4().hex[:12]
    group_a = "/queue/Consumer.A.%s" % name
    group_b = "/queue/Consumer.B.%s" % name
    clients = {key: Client(args, "virtual_topic_groups %s" % key) for key in ("a1", "a2", "b", "t")}
    try:
        clients["a1"].subscribe(group_a, "a1", ack="client-individual")
        clients["a2"].subscribe(group_a, "a2", ack="client-individual")
        clients["b"].subscribe(group_b, "b", ack="client-individual")
        clients["t"].subscribe("/topic/%s" % name, "t")
        expected = ["order %d" % i for i in range(10)]
        with Client(args, "virtual_topic_groups producer") as producer:
            for body in expected:
                producer.request("send", "/topic/%s" % name, body, persistent="true")
        for key in ("b", "t"):
            received = clients[key].listener.wait_messages(len(expected))
            clients[key].listener.expect_no_more_messages(len(expected))
            expect_equal(bodies(received), expected, "consumer %s" % key)
        clients["a1"].listener.wait_until(
            lambda: len(clients["a1"].messages) + len(clients["a2"].messages) >= len(expected), "group A's messages"
        )
        time.sleep(QUIET_SECONDS)
        shares = {key: bodies(clients[key].messages) for key in ("a1", "a2")}
        expect(shares["a1"] and shares["a2"], "group A's members did not both get messages: %r" % shares)
        expect_equal(sorted(shares["a1"] + shares["a2"], key=lambda b: int(b.split()[1])), expected, "group A's messages together")
        for key in ("a1", "a2"):
            for frame in list(clients[key].messages):
                clients[key].ack(frame)
        for frame in list(clients["b"].messages):
            clients["b"].ack(frame)
    finally:
        for client in clients.values():
            client.__exit__(None, None, None)


def check_transactions(args):
    """BEGIN/COMMIT/ABORT: transacted sends appear at COMMIT and vanish at ABORT; acks in an
    aborted transaction are redelivered (redelivered:true), acks in a committed one are final."""
    queue = queue_name("transactions")
    with Client(args, "transactions consumer") as consumer, Client(args, "transactions producer") as producer:
        consumer.subscribe(queue, "tx-sub", ack="client-individual")
        tx = "send-commit-%s" % uuid.uuid4().hex[:8]
        producer.request("begin", tx)
        for i in range(3):
            producer.request("send", queue, "committed %d" % i, transaction=tx, persistent="true")
        consumer.listener.expect_no_more_messages(0)
        producer.request("commit", tx)
        received = consumer.listener.wait_messages(3)
        expect_equal(bodies(received), ["committed %d" % i for i in range(3)], "committed sends")

        tx = "send-abort-%s" % uuid.uuid4().hex[:8]
        producer.request("begin", tx)
        producer.request("send", queue, "aborted", transaction=tx, persistent="true")
        producer.request("abort", tx)
        producer.request("send", queue, "plain", persistent="true")
        received = consumer.listener.wait_messages(4)
        consumer.listener.expect_no_more_messages(4)
        expect_equal(bodies(received)[3], "plain", "the send after the aborted transaction")

        tx = "ack-abort-%s" % uuid.uuid4().hex[:8]
        consumer.request("begin", tx)
        for frame in received:
            consumer.ack(frame, transaction=tx)
        consumer.listener.expect_no_more_messages(4)
        consumer.request("abort", tx)
        again = consumer.listener.wait_messages(8)[4:]
        consumer.listener.expect_no_more_messages(8)
        expect_equal(bodies(again), bodies(received), "messages redelivered after the aborted acks")
        for frame in again:
            expect_equal(frame.headers.get("redelivered"), "true", "redelivered header of %r" % frame.body)

        tx = "ack-commit-%s" % uuid.uuid4().hex[:8]
        consumer.request("begin", tx)
        for frame in again:
            consumer.ack(frame, transaction=tx)
        consumer.request("commit", tx)
        consumer.listener.expect_no_more_messages(8)
    with Client(args, "transactions afterwards") as client:
        client.subscribe(queue, "tx-after", ack="client-individual")
        client.listener.expect_no_more_messages(0)


def check_client_id_claimed(args):
    """A client-id is held by one connection at a time, as in ActiveMQ: a second CONNECT with it
    is answered with an ERROR whose message names the id, and closed; the first connection
    works on; once it has disconnected, the id can be used again (a durable subscriber that
    reconnects)."""
    client_id = "stomp-py-claimed-%s" % uuid.uuid4().hex[:12]
    queue = queue_name("client_id_claimed")
    with Client(args, "client_id_claimed first", client_id=client_id) as first:
        first.subscribe(queue, "claimed-1")
        listener = Collector("client_id_claimed second")
        second = stomp.Connection12(host_and_ports=[(args.host, args.port)], reconnect_attempts_max=1, timeout=WAIT_SECONDS)
        second.set_listener("collector", listener)
        try:
            second.connect(wait=True, headers={"client-id": client_id})
            refused = False
        except stomp.exception.ConnectFailedException:
            refused = True
        deadline = time.monotonic() + WAIT_SECONDS
        with listener.condition:
            while not (listener.errors and listener.disconnected):
                remaining = deadline - time.monotonic()
                expect(remaining > 0, "the second connection with client-id %s got no ERROR and close (errors %r, closed %r)"
                       % (client_id, [e.headers for e in listener.errors], listener.disconnected))
                listener.condition.wait(min(remaining, 0.1))
            error = listener.errors[0]
        expect(refused, "CONNECT with a client-id in use succeeded")
        message = error.headers.get("message", "")
        expect(client_id in message, "the ERROR names the client id: %r" % message)
        print("refused: %s" % message, flush=True)

        # The first connection is untouched.
        first.request("send", queue, "still mine")
        expect_equal(bodies(first.listener.wait_messages(1)), ["still mine"], "the first connection's message")
    # Disconnected (with its receipt): the id is free again.
    with Client(args, "client_id_claimed again", client_id=client_id) as again:
        again.subscribe(queue, "claimed-2")
        again.request("send", queue, "mine again")
        expect_equal(bodies(again.listener.wait_messages(1)), ["mine again"], "the reconnected client's message")


CHECKS = {
    "ordering": check_ordering,
    "custom_headers": check_custom_headers,
    "client_individual_acks": check_client_individual_acks,
    "binary_bodies": check_binary_bodies,
    "escaped_headers": check_escaped_headers,
    "large_body": check_large_body,
    "receipts": check_receipts,
    "nack": check_nack,
    "topic_fanout": check_topic_fanout,
    "durable_offline": check_durable_offline,
    "wildcards": check_wildcards,
    "virtual_topic_groups": check_virtual_topic_groups,
    "transactions": check_transactions,
    "client_id_claimed": check_client_id_claimed,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=61613)
    parser.add_argument("--check", action="append", choices=sorted(CHECKS), help="a check to run (repeatable); default: all")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    args = parser.parse_args()
    if args.list:
        for name, check in CHECKS.items():
            print("%-24s %s" % (name, " ".join(check.__doc__.split())))
        return 0
    names = args.check or list(CHECKS)
    print("stomp.py %s against %s:%d" % (stomp.__version__, args.host, args.port), flush=True)
    for name in names:
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
    # stomp.py's receiver threads are daemons; leave without waiting for them.
    os._exit(code)
