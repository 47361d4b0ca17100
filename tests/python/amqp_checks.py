"""ferromq through Qpid Proton, a real third-party AMQP 1.0 client.

Each check is run by tests/tests/integration/amqp.rs against a broker it started:
    python amqp_checks.py --url amqp://127.0.0.1:PORT --check NAME
and prints `ok NAME` when it passes (an exception or assertion fails it).
"""

import argparse
import sys
import time
import uuid

from proton import Message, byte, float32, int32, short, symbol
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container, DurableSubscription, Selector
from proton.utils import BlockingConnection

TIMEOUT = 20


def connect(url, container_id=None):
    container = Container()
    if container_id:
        container.container_id = container_id
    return BlockingConnection(url, timeout=TIMEOUT, container=container)


def unique(name):
    return "%s-%s" % (name, uuid.uuid4().hex[:8])


def receive_all(receiver, count):
    messages = []
    for _ in range(count):
        messages.append(receiver.receive(timeout=TIMEOUT))
        receiver.accept()
    return messages


def check_queue(url):
    queue = unique("queue://q")
    conn = connect(url)
    sender = conn.create_sender(queue)
    for i in range(20):
        sender.send(Message(body="message %d" % i, durable=True))
    receiver = conn.create_receiver(queue, credit=10)
    bodies = [m.body for m in receive_all(receiver, 20)]
    assert bodies == ["message %d" % i for i in range(20)], bodies
    conn.close()


def check_topic(url):
    topic = unique("topic://t")
    conn = connect(url)
    first = conn.create_receiver(topic, credit=10, name="first")
    second = conn.create_receiver(topic, credit=10, name="second")
    sender = conn.create_sender(topic)
    for i in range(5):
        sender.send(Message(body="news %d" % i))
    for receiver in (first, second):
        bodies = [m.body for m in receive_all(receiver, 5)]
        assert bodies == ["news %d" % i for i in range(5)], bodies
    conn.close()


def check_properties(url):
    queue = unique("q")
    conn = connect(url)
    sender = conn.create_sender(queue)
    message = Message(
        body="with properties",
        id="my-id-1",
        correlation_id="corr-7",
        subject="my-type",
        durable=True,
        priority=7,
        properties={"color": "red", "count": 42, "ratio": 0.5, "flag": True},
    )
    sender.send(message)
    received = conn.create_receiver(queue, credit=1).receive(timeout=TIMEOUT)
    assert received.body == "with properties", received.body
    assert received.id == "my-id-1", received.id
    assert received.correlation_id == "corr-7", received.correlation_id
    assert received.subject == "my-type", received.subject
    assert received.durable is True
    assert received.priority == 7, received.priority
    props = received.properties
    assert props["color"] == "red" and props["count"] == 42, props
    assert props["ratio"] == 0.5 and props["flag"] is True, props
    annotations = received.annotations or {}
    assert annotations.get(symbol("x-opt-jms-msg-type")) == 5, annotations
    conn.close()


def check_large(url):
    queue = unique("q")
    body = bytes((i * 7) % 256 for i in range(5 * 1024 * 1024))
    conn = connect(url)
    conn.create_sender(queue).send(Message(body=body, durable=True))
    received = conn.create_receiver(queue, credit=1).receive(timeout=60)
    assert received.body == body, len(received.body or b"")
    conn.close()


def check_credit(url):
    queue = unique("q")
    conn = connect(url)
    sender = conn.create_sender(queue)
    for i in range(5):
        sender.send(Message(body="m%d" % i))
    # No credit given: nothing may arrive.
    receiver = conn.create_receiver(queue)
    time.sleep(0.5)
    assert receiver.fetcher.has_message == 0, receiver.fetcher.has_message
    # receive() grants exactly one credit.
    assert receiver.receive(timeout=TIMEOUT).body == "m0"
    receiver.accept()
    time.sleep(0.5)
    conn.wait(lambda: True, timeout=0.2)
    assert receiver.fetcher.has_message == 0, receiver.fetcher.has_message
    receiver.link.flow(2)
    conn.wait(lambda: receiver.fetcher.has_message >= 2, timeout=TIMEOUT)
    time.sleep(0.3)
    conn.wait(lambda: True, timeout=0.2)
    assert receiver.fetcher.has_message == 2, receiver.fetcher.has_message
    conn.close()


def check_outcomes(url):
    queue = unique("q")
    conn = connect(url)
    sender = conn.create_sender(queue)
    sender.send(Message(body="released", durable=True))
    receiver = conn.create_receiver(queue)
    first = receiver.receive(timeout=TIMEOUT)
    assert first.body == "released"
    receiver.release(delivered=False)
    again = receiver.receive(timeout=TIMEOUT)
    assert again.body == "released"
    assert again.delivery_count == 0, again.delivery_count
    # modified with delivery-failed: redelivered and counted (proton sets the flag only
    # when asked).
    receiver.fetcher.unsettled[0].local.failed = True
    receiver.release(delivered=True)
    third = receiver.receive(timeout=TIMEOUT)
    assert third.body == "released"
    assert third.delivery_count == 1, third.delivery_count
    # rejected: dead-lettered (ActiveMQ.DLQ), not redelivered.
    receiver.reject()
    dlq = conn.create_receiver("ActiveMQ.DLQ", credit=1)
    dead = dlq.receive(timeout=TIMEOUT)
    assert dead.body == "released", dead.body
    dlq.accept()
    sender.send(Message(body="next"))
    assert receiver.receive(timeout=TIMEOUT).body == "next"
    receiver.accept()
    conn.close()


def check_selector(url):
    queue = unique("q")
    conn = connect(url)
    sender = conn.create_sender(queue)
    for color in ("blue", "red", "green", "red"):
        sender.send(Message(body=color, properties={"color": color}))
    receiver = conn.create_receiver(queue, credit=10, options=Selector("color = 'red'"))
    bodies = [m.body for m in receive_all(receiver, 2)]
    assert bodies == ["red", "red"], bodies
    conn.close()


def durable_receiver(conn, topic, name):
    return conn.create_receiver(topic, credit=10, name=name, options=DurableSubscription())


def check_durable_subscribe(url, client_id, topic):
    conn = connect(url, client_id)
    durable_receiver(conn, topic, "sub").detach()
    conn.close()


def check_durable_publish(url, topic, count):
    conn = connect(url)
    sender = conn.create_sender(topic)
    for i in range(count):
        sender.send(Message(body="durable %d" % i, durable=True))
    conn.close()


def check_durable_receive(url, client_id, topic, count, close):
    conn = connect(url, client_id)
    receiver = durable_receiver(conn, topic, "sub")
    bodies = [m.body for m in receive_all(receiver, count)]
    assert bodies == ["durable %d" % i for i in range(count)], bodies
    if close:
        receiver.close()
    else:
        receiver.detach()
    conn.close()


def check_durable(url):
    topic = unique("topic://d")
    check_durable_subscribe(url, "client-d", topic)
    check_durable_publish(url, topic, 3)
    check_durable_receive(url, "client-d", topic, 3, close=False)
    check_durable_publish(url, topic, 2)
    check_durable_receive(url, "client-d", topic, 2, close=True)


class TransactionalSend(MessagingHandler, TransactionHandler):
    """Sends one message in a transaction that commits and one in a transaction that rolls
    back."""

    def __init__(self, url, queue):
        super(TransactionalSend, self).__init__()
        self.url, self.queue = url, queue
        self.step = "commit"

    def on_start(self, event):
        self.conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(self.conn, self.queue)
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_declared(self, event):
        event.transaction.send(self.sender, Message(body=self.step, durable=True))
        if self.step == "commit":
            event.transaction.commit()
        else:
            event.transaction.abort()

    def on_transaction_committed(self, event):
        self.step = "rollback"
        event.container.declare_transaction(self.conn, handler=self)

    def on_transaction_aborted(self, event):
        self.conn.close()

    def on_transaction_declare_failed(self, event):
        raise AssertionError("declare failed")

    def on_transaction_commit_failed(self, event):
        raise AssertionError("commit failed")


def check_transactions(url):
    queue = unique("q")
    Container(TransactionalSend(url, queue)).run()
    conn = connect(url)
    receiver = conn.create_receiver(queue, credit=10)
    assert receiver.receive(timeout=TIMEOUT).body == "commit"
    receiver.accept()
    time.sleep(0.5)
    conn.wait(lambda: True, timeout=0.2)
    assert receiver.fetcher.has_message == 0, "the rolled back send arrived"
    conn.close()


def check_send(url, address, body):
    conn = connect(url)
    message = Message(
        body=body,
        durable=True,
        subject="amqp-type",
        correlation_id="corr-x",
        properties={"color": "red", "count": 7},
    )
    conn.create_sender(address).send(message)
    conn.close()


def check_receive_from_stomp(url, address):
    conn = connect(url)
    received = conn.create_receiver(address, credit=1).receive(timeout=TIMEOUT)
    # A STOMP SEND with content-length is a bytes message (ActiveMQ's rule): a data section.
    assert received.body in ("from stomp", b"from stomp"), received.body
    assert received.correlation_id == "corr-s", received.correlation_id
    assert received.properties.get("color") == "blue", received.properties
    conn.close()


# Cross-protocol with the ActiveMQ JMS client: tests/tests/integration/jms.rs runs
# `jms_interop_send`, then JmsChecks' `amqp_interop` (which checks what arrived and answers),
# then `jms_interop_receive`. The queue names are JmsChecks' FROM_AMQP and TO_AMQP.
FROM_AMQP = "queue://interop.from-amqp"
TO_AMQP = "queue://interop.to-amqp"
MSG_TYPE = symbol("x-opt-jms-msg-type")
# java.lang.String "hello", Java-serialized (what ObjectMessage.setObject("hello") carries).
SERIALIZED_HELLO = b"\xac\xed\x00\x05t\x00\x05hello"
SERIALIZED = "application/x-java-serialized-object"


def typed_properties():
    return {
        "s": "x",
        "i": int32(7),
        "l": 1 << 40,
        "b": True,
        "d": 2.5,
        "f": float32(1.5),
        "sh": short(3),
        "by": byte(-2),
    }


def check_jms_interop_send(url):
    conn = connect(url)
    sender = conn.create_sender(FROM_AMQP)
    sender.send(
        Message(
            body="h\u00e9llo from amqp \u2713",
            id="ID:amqp-interop-1",
            correlation_id="corr-a",
            subject="order",
            reply_to="queue://interop.replies",
            durable=True,
            priority=7,
            ttl=600,
            properties=typed_properties(),
        )
    )
    # inferred=True: a data section (a bytes message, as Qpid JMS sends one).
    sender.send(Message(body=bytes(range(256)), inferred=True, durable=False))
    amqp_map = {"s": "text", "i": int32(7), "l": 1 << 40, "b": True, "d": 2.5, "bin": b"\x00\x01"}
    sender.send(Message(body=amqp_map, annotations={MSG_TYPE: byte(2)}, durable=True))
    # A stream as Qpid JMS sends it (an amqp-value list) and as an amqp-sequence.
    stream = [int32(1), "two", 2.5, True]
    sender.send(Message(body=stream, annotations={MSG_TYPE: byte(4)}, durable=True))
    sender.send(Message(body=stream, inferred=True, durable=True))
    sender.send(
        Message(
            body=SERIALIZED_HELLO,
            inferred=True,
            content_type=SERIALIZED,
            annotations={MSG_TYPE: byte(1)},
            durable=True,
        )
    )
    conn.close()


def check_jms_interop_receive(url):
    conn = connect(url)
    receiver = conn.create_receiver(TO_AMQP, credit=10)
    text, binary, amqp_map, stream, obj = receive_all(receiver, 5)

    def msg_type(message):
        return (message.annotations or {}).get(MSG_TYPE)

    assert text.body == "\u00fcn\u00efcode reply", text.body
    assert msg_type(text) == 5, text.annotations
    assert isinstance(text.id, str) and text.id.startswith("ID:"), text.id
    assert text.correlation_id == "corr-2", text.correlation_id
    assert text.subject == "reply", text.subject
    assert text.reply_to == "interop.replies", text.reply_to
    assert (text.annotations or {}).get(symbol("x-opt-jms-reply-to")) == 0, text.annotations
    assert text.durable is True
    assert text.priority == 8, text.priority
    assert 590 <= text.ttl <= 600, text.ttl
    assert text.expiry_time - text.creation_time == 600, (text.expiry_time, text.creation_time)
    props = text.properties
    expected = {"s": "x", "i": 7, "l": 1 << 40, "b": True, "d": 2.5, "f": 1.5, "sh": 3, "by": -2}
    assert props == expected, props
    for name, kind in [("i", int32), ("sh", short), ("by", byte), ("f", float32)]:
        assert type(props[name]) is kind, (name, type(props[name]))

    assert binary.body == bytes(range(256)), binary.body
    assert msg_type(binary) == 3, binary.annotations
    assert binary.durable is False

    assert msg_type(amqp_map) == 2, amqp_map.annotations
    want = {"s": "text", "i": 7, "l": 1 << 40, "b": True, "d": 2.5, "bin": b"\x00\x01"}
    assert amqp_map.body == want, amqp_map.body
    assert type(amqp_map.body["i"]) is int32, type(amqp_map.body["i"])

    assert msg_type(stream) == 4, stream.annotations
    assert stream.body == [1, "two", 2.5, True], stream.body
    assert type(stream.body[0]) is int32, type(stream.body[0])

    assert msg_type(obj) == 1, obj.annotations
    assert obj.content_type == SERIALIZED, obj.content_type
    assert isinstance(obj.body, bytes) and obj.body.startswith(b"\xac\xed"), obj.body
    assert b"hello back" in obj.body, obj.body
    conn.close()

class OpenWatcher(MessagingHandler):
    """Opens one connection with container id `container_id` and records how the broker
    answers: `condition` is the error it closed the connection with, if any."""

    def __init__(self, url, container_id):
        super().__init__()
        self.url = url
        self.container_id = container_id
        self.opened = False
        self.condition = None
        self.connection = None
        self.timer = None

    def on_start(self, event):
        event.container.container_id = self.container_id
        self.connection = event.container.connect(self.url, reconnect=False)
        # Only a broker that wrongly accepts the connection gets here: the check fails then.
        self.timer = event.container.schedule(TIMEOUT, self)

    def on_connection_opened(self, event):
        self.opened = True

    def on_connection_error(self, event):
        self.condition = event.connection.remote_condition
        self.timer.cancel()

    def on_timer_task(self, event):
        self.connection.close()


def check_client_id_claimed(url):
    """The container id is the JMS client id, which one live connection may hold (as in
    ActiveMQ): a second connection with it is answered with an open then a close with
    amqp:invalid-field naming container-id; the first works on; once it has closed, the id can
    be used again."""
    client_id = unique("claimed")
    queue = unique("queue://claimed")
    first = connect(url, client_id)
    watcher = OpenWatcher(url, client_id)
    Container(watcher).run()
    condition = watcher.condition
    assert condition is not None, "the second connection with container id %s was not refused" % client_id
    assert condition.name == "amqp:invalid-field", condition
    assert condition.info == {symbol("invalid-field"): symbol("container-id")}, condition.info
    assert client_id in (condition.description or ""), condition.description
    print("refused: %s: %s" % (condition.name, condition.description))

    # The first connection is untouched.
    sender = first.create_sender(queue)
    sender.send(Message(body="still mine", durable=True))
    receiver = first.create_receiver(queue, credit=10)
    assert [m.body for m in receive_all(receiver, 1)] == ["still mine"]
    first.close()

    # Its close (answered once the broker let go of it) frees the id.
    again = connect(url, client_id)
    again.create_sender(queue).send(Message(body="mine again", durable=True))
    receiver = again.create_receiver(queue, credit=10)
    assert [m.body for m in receive_all(receiver, 1)] == ["mine again"]
    again.close()


class NeverSettles(MessagingHandler):
    """Takes one message from `address` (credit 1, granted once) and never settles it, so that
    the broker sees a full prefetch while more messages wait; records the error the link (or,
    with `whole_connection`, the connection) is closed with."""

    def __init__(self, url, address, whole_connection):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=False)
        self.url = url
        self.address = address
        self.whole_connection = whole_connection
        self.received = []
        self.condition = None
        self.detached_open = False
        self.timer = None

    def on_start(self, event):
        self.connection = event.container.connect(self.url, reconnect=False)
        receiver = event.container.create_receiver(self.connection, self.address, name="slow")
        receiver.flow(1)
        self.timer = event.container.schedule(TIMEOUT, self)

    def on_message(self, event):
        self.received.append(event.message.body)

    def on_link_remote_detach(self, event):
        # A detach that does not close the link: wrong for an aborted consumer.
        self.detached_open = True
        self.finish(event)

    def on_link_error(self, event):
        if not self.whole_connection:
            self.condition = event.link.remote_condition
            self.finish(event)

    def on_connection_error(self, event):
        if self.whole_connection:
            self.condition = event.connection.remote_condition
        self.finish(event)

    def finish(self, event):
        self.timer.cancel()
        event.connection.close()

    def on_timer_task(self, event):
        self.connection.close()


def check_slow_abort(url, address, count, whole_connection):
    """A receiver that never settles is aborted by the policy's slow consumer strategy: its link
    is closed with amqp:internal-error (ActiveMQ's condition for a consumer the broker closes)
    and the reason, or with abort_connection the connection; nothing is lost: every message,
    the unsettled one included, goes to the next consumer."""
    conn = connect(url)
    sender = conn.create_sender(address)
    for i in range(count):
        sender.send(Message(body="slow %d" % i, durable=True))
    conn.close()
    handler = NeverSettles(url, address, whole_connection)
    Container(handler).run()
    assert not handler.detached_open, "the link was detached without being closed"
    condition = handler.condition
    assert condition is not None, "no error closed the slow consumer within %d s (got %r)" % (TIMEOUT, handler.received)
    assert condition.name == "amqp:internal-error", condition
    assert "slow" in (condition.description or ""), condition.description
    assert handler.received == ["slow 0"], handler.received
    print("aborted: %s: %s" % (condition.name, condition.description))

    conn = connect(url)
    receiver = conn.create_receiver(address, credit=count)
    bodies = sorted(m.body for m in receive_all(receiver, count))
    assert bodies == sorted("slow %d" % i for i in range(count)), bodies
    conn.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--check", required=True)
    parser.add_argument("--address")
    parser.add_argument("--body")
    parser.add_argument("--client-id")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--close", action="store_true")
    args = parser.parse_args()
    checks = {
        "queue": lambda: check_queue(args.url),
        "topic": lambda: check_topic(args.url),
        "properties": lambda: check_properties(args.url),
        "large": lambda: check_large(args.url),
        "credit": lambda: check_credit(args.url),
        "outcomes": lambda: check_outcomes(args.url),
        "selector": lambda: check_selector(args.url),
        "durable": lambda: check_durable(args.url),
        "durable_subscribe": lambda: check_durable_subscribe(args.url, args.client_id, args.address),
        "durable_publish": lambda: check_durable_publish(args.url, args.address, args.count),
        "durable_receive": lambda: check_durable_receive(
            args.url, args.client_id, args.address, args.count, args.close
        ),
        "transactions": lambda: check_transactions(args.url),
        "send": lambda: check_send(args.url, args.address, args.body),
        "receive_from_stomp": lambda: check_receive_from_stomp(args.url, args.address),
        "jms_interop_send": lambda: check_jms_interop_send(args.url),
        "jms_interop_receive": lambda: check_jms_interop_receive(args.url),
        "client_id_claimed": lambda: check_client_id_claimed(args.url),
        "slow_abort_link": lambda: check_slow_abort(args.url, args.address, args.count, False),
        "slow_abort_connection": lambda: check_slow_abort(args.url, args.address, args.count, True),
    }
    checks[args.check]()
    print("ok %s" % args.check)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
