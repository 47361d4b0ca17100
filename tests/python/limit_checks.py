#!/usr/bin/env python3
"""ferromq's destination limit ([destinations] max_destinations, a policy's max_destinations)
through real third-party clients: stomp.py and Qpid Proton.

    limit_checks.py --check stomp_send|stomp_subscribe|amqp_send|amqp_receive
                    --port PORT --queue NAME [--expect-refused]

Each check does one operation on --queue (which may be a composite, `A,B`): a persistent SEND
with a receipt, a SUBSCRIBE with a receipt, an AMQP sender link and one durable message, an
AMQP receiver link. Without --expect-refused the operation must succeed ("ok CHECK"). With it
the broker must refuse it for the destination limit: a STOMP ERROR frame whose message says
the maximum number of destinations was reached, or an AMQP link detached with condition
amqp:resource-limit-exceeded and that description ("refused CHECK: why"); any other outcome
fails. Run by tests/tests/integration/destination_limits.rs.
"""

import argparse
import sys
import threading

HOST = "127.0.0.1"
TIMEOUT = 20
REASON = "maximum number of destinations allowed"
CONDITION = "amqp:resource-limit-exceeded"


class Refused(Exception):
    """The broker refused the operation; the message says why."""


def stomp_connection(args):
    import stomp

    class Answers(stomp.ConnectionListener):
        def __init__(self):
            self.condition = threading.Condition()
            self.receipts = set()
            self.errors = []

        def on_receipt(self, frame):
            with self.condition:
                self.receipts.add(frame.headers.get("receipt-id"))
                self.condition.notify_all()

        def on_error(self, frame):
            with self.condition:
                self.errors.append(frame.headers.get("message", ""))
                self.condition.notify_all()

        def wait_receipt(self, receipt):
            with self.condition:
                self.condition.wait_for(lambda: receipt in self.receipts or self.errors, TIMEOUT)
                if self.errors:
                    raise Refused("STOMP ERROR: %s" % self.errors[0])
                if receipt not in self.receipts:
                    raise AssertionError("neither receipt %s nor an ERROR" % receipt)

    conn = stomp.Connection12(
        [(HOST, args.port)], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=TIMEOUT
    )
    answers = Answers()
    conn.set_listener("answers", answers)
    conn.connect(wait=True)
    return conn, answers


def stomp_send(args):
    conn, answers = stomp_connection(args)
    conn.send("/queue/%s" % args.queue, "hello", headers={"persistent": "true", "receipt": "sent"})
    answers.wait_receipt("sent")
    conn.disconnect()


def stomp_subscribe(args):
    conn, answers = stomp_connection(args)
    conn.subscribe("/queue/%s" % args.queue, id="1", ack="auto", headers={"receipt": "subscribed"})
    answers.wait_receipt("subscribed")
    conn.disconnect()


def amqp_link(create):
    from proton.utils import BlockingConnection, LinkDetached

    conn = BlockingConnection("amqp://%s:%d" % (HOST, ARGS.port), timeout=TIMEOUT)
    try:
        link = create(conn)
    except LinkDetached as detached:
        raise Refused("link detached: %s (condition %s)" % (detached, detached.condition))
    return conn, link


def amqp_send(args):
    from proton import Message

    conn, sender = amqp_link(lambda conn: conn.create_sender("queue://%s" % args.queue))
    sender.send(Message(body="hello", durable=True))
    conn.close()


def amqp_receive(args):
    conn, _ = amqp_link(lambda conn: conn.create_receiver("queue://%s" % args.queue, credit=1))
    conn.close()


CHECKS = {
    "stomp_send": stomp_send,
    "stomp_subscribe": stomp_subscribe,
    "amqp_send": amqp_send,
    "amqp_receive": amqp_receive,
}


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", choices=sorted(CHECKS), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--expect-refused", action="store_true")
    ARGS = args = parser.parse_args()
    try:
        CHECKS[args.check](args)
    except Refused as refused:
        why = str(refused)
        if not args.expect_refused:
            raise
        if REASON not in why or (args.check.startswith("amqp") and CONDITION not in why):
            print("FAIL %s: refused for another reason: %s" % (args.check, why), file=sys.stderr)
            return 1
        print("refused %s: %s" % (args.check, why))
        return 0
    if args.expect_refused:
        print("FAIL %s: the broker accepted %s" % (args.check, args.queue), file=sys.stderr)
        return 1
    print("ok %s" % args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
