#!/usr/bin/env python3
"""ferromq's TLS and logins through real third-party clients: stomp.py (stomp:// and
stomp+ssl://) and Qpid Proton (amqp:// and amqps://, ferromq's amqp+ssl:// connector).

    security_checks.py --check stomp|amqp --port PORT (--ca CA.pem | --plain)
                       [--cert CLIENT.pem --key CLIENT-KEY.pem]
                       [--user USER --password PASSWORD] [--expect-refused]

Over TLS the client verifies the broker's certificate against CA.pem and its name,
`localhost`. With --user it logs in (STOMP login/passcode, AMQP SASL PLAIN); without, it
connects anonymously. A check sends a few messages to a fresh queue, receives and
acknowledges them, and prints "ok CHECK". With --expect-refused it passes when the broker
refuses the client (a failed handshake or login, or a closed connection) and prints
"refused CHECK: why". Run by tests/tests/integration/tls.rs and authentication.rs.
"""

import argparse
import sys
import threading
import uuid

HOST = "localhost"
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


CHECKS = {"stomp": stomp_check, "amqp": amqp_check}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", choices=sorted(CHECKS), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--user")
    parser.add_argument("--password")
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
