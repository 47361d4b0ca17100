#!/usr/bin/env python3
"""ferromq's TLS and logins through real third-party clients: stomp.py (stomp:// and
stomp+ssl://) and Qpid Proton (amqp:// and amqps://, ferromq's amqp+ssl:// connector).

    security_checks.py --check stomp|amqp --port PORT (--ca CA.pem | --plain)
                       [--cert CLIENT.pem --key CLIENT-KEY.pem]
                       [--user USER --password PASSWORD] [--expect-refused]

Every connection goes to 127.0.0.1, where the tests' brokers listen: `localhost` may resolve
to ::1 first, where another program may listen. Over TLS the client verifies the broker's
certificate against CA.pem and its name: Qpid Proton checks (and sends as SNI) `localhost`;
stomp.py checks the name it connects to, 127.0.0.1, which the certificate also carries. With --user it logs in (STOMP login/passcode, AMQP SASL PLAIN); without, it
connects anonymously. A check sends a few messages to a fresh queue, receives and
acknowledges them, and prints "ok CHECK". With --expect-refused it passes when the broker
refuses the client (a failed handshake or login, or a closed connection) and prints
"refused CHECK: why". The checks stomp_send, stomp_subscribe, amqp_send and amqp_receive do
one operation on --queue over plaintext, for the authorization tests. Run by
tests/tests/integration/tls.rs, authentication.rs and authorization.rs.
"""

import argparse
import sys
import threading
import uuid

HOST = "127.0.0.1"
# The name the broker's certificate carries (scripts/test-pki), for the clients that can check
# a name other than the address they connect to.
SERVER_NAME = "localhost"
TIMEOUT = 20


def stomp_check(args):
    import stomp

    class Collector(stomp.ConnectionListener):
        def __init__(self):
            self.condition = threading.Condition()
            self.messages = []

        def on_message(self, frame):
            with self.condition:
                self.messages.append(frame)
                self.condition.notify_all()

    conn = stomp.Connection12(
        [(HOST, args.port)], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=TIMEOUT
    )
    if not args.plain:
        conn.set_ssl(
            for_hosts=[(HOST, args.port)],
            ca_certs=args.ca,
            cert_file=args.cert,
            key_file=args.key,
        )
    collector = Collector()
    conn.set_listener("collector", collector)
    conn.connect(username=args.user, passcode=args.password, wait=True)
    queue = "/queue/tls-%s" % uuid.uuid4().hex[:8]
    conn.subscribe(queue, id="1", ack="client-individual")
    bodies = ["secret %d" % i for i in range(10)]
    for body in bodies:
        conn.send(queue, body, headers={"persistent": "true"})
    with collector.condition:
        collector.condition.wait_for(lambda: len(collector.messages) >= len(bodies), TIMEOUT)
        received = [frame.body for frame in collector.messages]
    assert received == bodies, received
    for frame in collector.messages:
        conn.ack(frame.headers["ack"])
    conn.disconnect()


def amqp_check(args):
    from proton import Message, SSLDomain
    from proton.utils import BlockingConnection

    options = {}
    if args.plain:
        url = "amqp://%s:%d" % (HOST, args.port)
        # PLAIN over a plaintext connection is this check's own choice (loopback).
        options["allow_insecure_mechs"] = True
    else:
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(args.ca)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        if args.cert:
            domain.set_credentials(args.cert, args.key, None)
        url = "amqps://%s:%d" % (HOST, args.port)
        options["ssl_domain"] = domain
        # Checked against the certificate (VERIFY_PEER_NAME) instead of the url's host.
        options["sni"] = SERVER_NAME
    if args.user is not None:
        options.update(user=args.user, password=args.password, allowed_mechs="PLAIN")
    conn = BlockingConnection(url, timeout=TIMEOUT, **options)
    queue = "tls-%s" % uuid.uuid4().hex[:8]
    sender = conn.create_sender(queue)
    bodies = ["secret %d" % i for i in range(10)]
    for body in bodies:
        sender.send(Message(body=body, durable=True))
    receiver = conn.create_receiver(queue, credit=10)
    received = []
    for _ in bodies:
        received.append(receiver.receive(timeout=TIMEOUT).body)
        receiver.accept()
    assert received == bodies, received
    conn.close()


def stomp_connection(args):
    import stomp

    class Answers(stomp.ConnectionListener):
        def __init__(self):
            self.condition = threading.Condition()
            self.receipts = set()
            self.errors = []
            self.messages = []

        def on_receipt(self, frame):
            with self.condition:
                self.receipts.add(frame.headers.get("receipt-id"))
                self.condition.notify_all()

        def on_error(self, frame):
            with self.condition:
                self.errors.append(frame.headers.get("message", ""))
                self.condition.notify_all()

        def on_message(self, frame):
            with self.condition:
                self.messages.append(frame)
                self.condition.notify_all()

        def wait_receipt(self, receipt):
            with self.condition:
                self.condition.wait_for(lambda: receipt in self.receipts or self.errors, TIMEOUT)
                if self.errors:
                    raise RuntimeError("ERROR: %s" % self.errors[0])
                assert receipt in self.receipts, "no receipt %s" % receipt

    conn = stomp.Connection12(
        [(HOST, args.port)], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=TIMEOUT
    )
    answers = Answers()
    conn.set_listener("answers", answers)
    conn.connect(username=args.user, passcode=args.password, wait=True)
    return conn, answers


def stomp_send(args):
    """One persistent SEND to --queue, with a receipt."""
    conn, answers = stomp_connection(args)
    conn.send("/queue/%s" % args.queue, "hello", headers={"persistent": "true", "receipt": "sent"})
    answers.wait_receipt("sent")
    conn.disconnect()


def stomp_subscribe(args):
    """A SUBSCRIBE to --queue, with a receipt."""
    conn, answers = stomp_connection(args)
    conn.subscribe("/queue/%s" % args.queue, id="1", ack="auto", headers={"receipt": "subscribed"})
    answers.wait_receipt("subscribed")
    conn.disconnect()


def amqp_connection(args):
    from proton.utils import BlockingConnection

    url = "amqp://%s:%d" % (HOST, args.port)
    return BlockingConnection(
        url,
        timeout=TIMEOUT,
        user=args.user,
        password=args.password,
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
    )


def amqp_send(args):
    """One durable message to --queue, settled by the broker as accepted."""
    from proton import Message

    conn = amqp_connection(args)
    sender = conn.create_sender(args.queue)
    sender.send(Message(body="hello", durable=True))
    conn.close()


def amqp_send_anonymous(args):
    """One durable message addressed to --queue, through the anonymous relay (a sender link
    without a target), accepted by the broker."""
    from proton import Message

    conn = amqp_connection(args)
    sender = conn.create_sender(None)
    sender.send(Message(address=args.queue, body="hello", durable=True))
    conn.close()


def amqp_receive(args):
    """A receiver on --queue, attached by the broker."""
    conn = amqp_connection(args)
    conn.create_receiver(args.queue, credit=1)
    conn.close()


CHECKS = {
    "stomp": stomp_check,
    "amqp": amqp_check,
    "stomp_send": stomp_send,
    "stomp_subscribe": stomp_subscribe,
    "amqp_send": amqp_send,
    "amqp_receive": amqp_receive,
    "amqp_send_anonymous": amqp_send_anonymous,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", choices=sorted(CHECKS), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--queue", help="the queue of the single-operation checks")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--expect-refused", action="store_true")
    args = parser.parse_args()
    if not args.plain and not args.ca:
        parser.error("give --ca for TLS, or --plain")
    try:
        CHECKS[args.check](args)
    except Exception as error:  # the client library's own exception types vary
        if args.expect_refused:
            print("refused %s: %s: %s" % (args.check, type(error).__name__, error))
            return 0
        raise
    if args.expect_refused:
        print("FAIL %s: the broker let the client in" % args.check, file=sys.stderr)
        return 1
    print("ok %s" % args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
