#!/usr/bin/env python3
"""paho-mqtt clients for the crash tests of the real ferromq binary (broker/tests/mqtt_crash.rs).

The test kills and restarts the broker under these clients; each one reports what paho saw
as lines on stdout, one event a line, flushed at once, which the test keeps as its ledger:

    mqtt_crash_client.py publisher  --port P --version V --client-id ID --topic T [--window W]
    mqtt_crash_client.py subscriber --port P --version V --client-id ID --filter F
    mqtt_crash_client.py subscribe  --port P --version V --client-id ID --filter F --qos Q
    mqtt_crash_client.py publish    --port P --version V [--retain] (--topic T --qos Q --payload=P... |
                                    --message TOPIC QOS PAYLOAD...)
    mqtt_crash_client.py receive    --port P --version V --client-id ID [--persistent]
                                    [--filter F --qos Q] --count N

`publisher` and `subscriber` live across broker restarts (paho keeps a session's in-flight
QoS 2 state in memory only, so the process must outlive the broker) and reconnect on their
own; they stop when stdin says `stop` (the publisher: publish nothing new) or `exit`.
`publisher` publishes the payloads 0, 1, 2... at QoS 2 with at most W unconfirmed:

    connected sp=0|1 rc=N     every CONNACK (rc: its reason code's value)
    disconnected              every loss of the connection
    sent N mid=M              once paho has taken message N (as packet id M; its done may come first)
    done mid=M rc=N           paho's on_publish for packet id M: PUBCOMP (rc its reason code)

`subscriber` subscribes to F at QoS 2 at its first CONNACK only (later ones must resume the
session) and prints `subscribed CODES` and `recv PAYLOAD dup=D qos=Q` for each message paho
hands over (at PUBREL for QoS 2).

The one-shot commands print `connected ...`, `subscribed CODES`, `done INDEX rc=N` (publish,
each message waited for in turn) and `recv TOPIC qos=Q retain=R PAYLOAD` (receive: N
messages, then a quiet moment to catch an extra one), and `ok` at the end; a wait that
runs out prints `timeout WHAT` and exits with status 1. Persistent sessions are 3.1.1's
clean session 0 and 5.0's clean start 0 with a session expiry interval.
"""

import argparse
import queue
import sys
import threading

try:
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties
except ImportError:  # pragma: no cover - reported to the caller
    sys.stderr.write("paho-mqtt is not installed for %s: run scripts/test, which creates .venv\n" % sys.executable)
    sys.exit(2)

VERSIONS = {"3.1.1": mqtt.MQTTv311, "5.0": mqtt.MQTTv5}
# How long a one-shot command waits for anything it expects.
WAIT_SECONDS = 20.0
# How long `receive` watches for a message beyond the expected ones.
QUIET_SECONDS = 1.0
# The session expiry interval of a 5.0 persistent session: longer than any test.
SESSION_EXPIRY_SECONDS = 3600

_print_lock = threading.Lock()


def say(line):
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def payload_text(message):
    return message.payload.decode("utf-8", "replace")


class ReconnectSafeClient(mqtt.Client):
    """paho-mqtt 2.1.0 puts its outgoing messages "in a valid state" at every reconnect()
    call, failed attempts included: the first turns a QoS 2 message waiting for PUBCOMP into
    "resend PUBREL", the second (the broker still down) turns that into "publish", and the
    PUBLISH goes out again, DUP 0, after its PUBREL was sent (against MQTT-4.3.3: the PUBLISH
    is not resent once PUBREL was). No broker can tell such a resend from a new message. Here
    a message that is to resend its PUBREL keeps that state across attempts."""

    def _messages_reconnect_reset_out(self):
        with self._out_message_mutex:
            releasing = [m for m in self._out_messages.values() if m.state == mqtt.mqtt_ms_resend_pubrel]
        super()._messages_reconnect_reset_out()
        with self._out_message_mutex:
            for message in releasing:
                message.state = mqtt.mqtt_ms_resend_pubrel


class Paho:
    """A paho client on its own network thread, reconnecting quickly (the broker is restarted
    under it), its CONNACKs, SUBACKs and messages in queues."""

    def __init__(self, args, client_id, persistent):
        self.version = VERSIONS[args.version]
        self.persistent = persistent
        self.connacks = queue.Queue()
        self.subacks = queue.Queue()
        self.messages = queue.Queue()
        self.pubacks = queue.Queue()
        if self.version == mqtt.MQTTv5:
            self.client = ReconnectSafeClient(
                mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=self.version
            )
        else:
            self.client = ReconnectSafeClient(
                mqtt.CallbackAPIVersion.VERSION2,
                client_id=client_id,
                protocol=self.version,
                clean_session=not persistent,
            )
        # Back on within a fraction of a second of the broker's restart.
        self.client.reconnect_delay_set(min_delay=0.05, max_delay=0.3)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = lambda c, u, flags, rc, props: say("disconnected")
        self.client.on_subscribe = lambda c, u, mid, codes, props: self.subacks.put([code.value for code in codes])
        self.client.on_message = lambda c, u, message: self.messages.put(message)
        self.client.on_publish = lambda c, u, mid, rc, props: self.pubacks.put((mid, rc.value))

    def _on_connect(self, client, userdata, flags, rc, props):
        say("connected sp=%d rc=%d" % (1 if flags.session_present else 0, rc.value))
        self.connacks.put((flags.session_present, rc.value))

    def connect(self, args):
        kwargs = {"keepalive": 30}
        if self.version == mqtt.MQTTv5:
            kwargs["clean_start"] = not self.persistent
            if self.persistent:
                properties = Properties(PacketTypes.CONNECT)
                properties.SessionExpiryInterval = SESSION_EXPIRY_SECONDS
                kwargs["properties"] = properties
        self.client.connect(args.host, args.port, **kwargs)
        self.client.loop_start()
        session_present, rc = wait(self.connacks, "CONNACK")
        if rc != 0:
            say("refused rc=%d" % rc)
            sys.exit(1)
        return session_present

    def close(self):
        # Our own DISCONNECT is no lost connection.
        self.client.on_disconnect = None
        self.client.disconnect()
        self.client.loop_stop()


def wait(events, what, timeout=WAIT_SECONDS):
    try:
        return events.get(timeout=timeout)
    except queue.Empty:
        say("timeout %s" % what)
        sys.exit(1)


def read_commands(on_command):
    """Calls `on_command(line)` for each line of stdin, then with "exit" at its end (the test
    went away)."""

    def run():
        for line in sys.stdin:
            on_command(line.strip())
        on_command("exit")

    threading.Thread(target=run, daemon=True).start()


def run_publisher(args):
    paho = Paho(args, args.client_id, persistent=True)
    state = threading.Condition()
    counts = {"sent": 0, "done": 0, "stop": False, "exit": False}

    def on_publish(client, userdata, mid, rc, props):
        say("done mid=%d rc=%d" % (mid, rc.value))
        with state:
            counts["done"] += 1
            state.notify_all()

    def on_command(line):
        with state:
            if line in ("stop", "exit"):
                counts["stop"] = True
            if line == "exit":
                counts["exit"] = True
            state.notify_all()

    paho.client.on_publish = on_publish
    paho.client.max_inflight_messages_set(args.window)
    paho.connect(args)
    read_commands(on_command)
    number = 0
    while True:
        with state:
            while not counts["stop"] and counts["sent"] - counts["done"] >= args.window:
                state.wait(1.0)
            if counts["stop"]:
                break
            counts["sent"] += 1
        # Under no lock of ours: paho calls on_publish (which prints) under its own lock,
        # which publish takes too. The packet id is known only once publish returns, so the
        # test pairs `done` lines with `sent` ones by packet id, in whichever order they came.
        info = paho.client.publish(args.topic, str(number).encode(), qos=2)
        say("sent %d mid=%d" % (number, info.mid))
        number += 1
    with state:
        while not counts["exit"]:
            state.wait(1.0)
    paho.close()


def run_subscriber(args):
    paho = Paho(args, args.client_id, persistent=True)
    done = threading.Event()

    def on_message(client, userdata, message):
        say("recv %s dup=%d qos=%d" % (payload_text(message), 1 if message.dup else 0, message.qos))

    def on_command(line):
        if line == "exit":
            done.set()

    paho.client.on_message = on_message
    paho.client.on_subscribe = lambda c, u, mid, codes, props: say(
        "subscribed " + ",".join(str(code.value) for code in codes)
    )
    paho.connect(args)
    # Once: a reconnect must find the subscription in the session.
    paho.client.subscribe(args.filter, qos=2)
    read_commands(on_command)
    done.wait()
    paho.close()


def run_subscribe(args):
    paho = Paho(args, args.client_id, persistent=True)
    paho.connect(args)
    paho.client.subscribe(args.filter, qos=args.qos)
    say("subscribed " + ",".join(str(code) for code in wait(paho.subacks, "SUBACK")))
    paho.close()
    say("ok")


def run_publish(args):
    paho = Paho(args, None, persistent=False)
    paho.connect(args)
    messages = [(args.topic, args.qos, payload) for payload in args.payloads]
    messages += [(topic, int(qos), payload) for topic, qos, payload in args.messages]
    for index, (topic, qos, payload) in enumerate(messages):
        # `--payload=` publishes an empty payload (which clears a retained message).
        paho.client.publish(topic, payload.encode(), qos=qos, retain=args.retain)
        _, rc = wait(paho.pubacks, "the acknowledgement of message %d" % index)
        say("done %d rc=%d" % (index, rc))
    paho.close()
    say("ok")


def run_receive(args):
    paho = Paho(args, args.client_id, persistent=args.persistent)
    paho.connect(args)
    if args.filter is not None:
        paho.client.subscribe(args.filter, qos=args.qos)
        say("subscribed " + ",".join(str(code) for code in wait(paho.subacks, "SUBACK")))
    for index in range(args.count):
        message = wait(paho.messages, "message %d of %d" % (index + 1, args.count))
        say_message(message)
    try:
        message = paho.messages.get(timeout=QUIET_SECONDS)
        say_message(message)
    except queue.Empty:
        pass
    paho.close()
    say("ok")


def say_message(message):
    say("recv %s qos=%d retain=%d %s" % (message.topic, message.qos, 1 if message.retain else 0, payload_text(message)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["publisher", "subscriber", "subscribe", "publish", "receive"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--version", choices=sorted(VERSIONS), required=True)
    parser.add_argument("--client-id")
    parser.add_argument("--topic")
    parser.add_argument("--filter")
    parser.add_argument("--qos", type=int, default=1)
    parser.add_argument("--retain", action="store_true")
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--payload", dest="payloads", action="append", default=[])
    parser.add_argument("--message", dest="messages", nargs=3, action="append", default=[],
                        metavar=("TOPIC", "QOS", "PAYLOAD"))
    args = parser.parse_args()
    commands = {
        "publisher": run_publisher,
        "subscriber": run_subscriber,
        "subscribe": run_subscribe,
        "publish": run_publish,
        "receive": run_receive,
    }
    commands[args.command](args)


if __name__ == "__main__":
    main()
