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

    def __init__(self, args, name, version="1.2", auto_decode=True, auto_content_length=True):
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
        self.connection.connect(wait=True)

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


def queue_name(check):
    return "/queue/stomp_py.%s.%s" % (check, uuid.uuid4().hex[:12])


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
        expect_equal(frame.headers.get("persistent"), "false", "persistent header of a plain send")
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


CHECKS = {
    "ordering": check_ordering,
    "custom_headers": check_custom_headers,
    "client_individual_acks": check_client_individual_acks,
    "binary_bodies": check_binary_bodies,
    "escaped_headers": check_escaped_headers,
    "large_body": check_large_body,
    "receipts": check_receipts,
    "nack": check_nack,
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
