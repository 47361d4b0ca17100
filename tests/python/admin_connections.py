#!/usr/bin/env python3
"""Holds one STOMP (stomp.py), one MQTT 3.1.1 (paho-mqtt) and one AMQP 1.0 (Qpid Proton)
connection open to a running ferromq broker, for the admin endpoint's connection list
(tests/tests/integration/admin_connections.rs), one command a line on stdin:

    admin_connections.py --host 127.0.0.1 --stomp-port P --mqtt-port P --amqp-port P
                         --user U --password P

On start each connection logs in as U with a client id of its protocol's name ("adm-stomp",
"adm-mqtt", "adm-amqp"), starts one consumer (on /queue/adm.stomp.in, the MQTT topic
adm/mqtt/in, the AMQP queue adm.amqp.in) and sends (2 STOMP SENDs to /queue/adm.stomp.out, 3
MQTT QoS 1 PUBLISHes to adm/mqtt/out, 4 AMQP messages over a sender link to adm.amqp.out);
then it prints "ready STOMP_PORT MQTT_PORT" (the local ports of those two connections).

    closed PROTOCOL   waits (20 s at most) until the broker has closed that connection;
                      answers "ok closed PROTOCOL" with, for STOMP, the ERROR frame's message
                      if one came first ("error=none" if none did)
    open PROTOCOL     answers "ok open PROTOCOL" if that connection is still open
    quit

Anything wrong prints "FAIL why" and exits with status 1.
"""

import argparse
import queue
import sys
import threading
import time

try:
    import paho.mqtt.client as mqtt
    import stomp
    from proton import Message
    from proton.reactor import Container
    from proton.utils import BlockingConnection
except ImportError:  # pragma: no cover - reported to the caller
    sys.stderr.write("paho-mqtt, stomp.py or Qpid Proton is not installed: run scripts/test\n")
    sys.exit(2)

WAIT_SECONDS = 20.0


def fail(why):
    print("FAIL %s" % why, flush=True)
    sys.exit(1)


class StompWatcher(stomp.ConnectionListener):
    def __init__(self):
        self.errors = []
        self.disconnected = threading.Event()

    def on_error(self, frame):
        self.errors.append(frame.headers.get("message", ""))

    def on_disconnected(self):
        self.disconnected.set()


def open_stomp(args):
    conn = stomp.Connection([(args.host, args.stomp_port)], heartbeats=(0, 0), reconnect_attempts_max=1)
    watcher = StompWatcher()
    conn.set_listener("watcher", watcher)
    conn.connect(username=args.user, passcode=args.password, wait=True, headers={"client-id": "adm-stomp"})
    conn.subscribe("/queue/adm.stomp.in", id="1", ack="auto")
    for i in range(2):
        conn.send("/queue/adm.stomp.out", "stomp %d" % i, headers={"receipt": "r%d" % i})
    port = conn.transport.socket.getsockname()[1]
    return conn, watcher, port


def open_mqtt(args):
    connacks = queue.Queue()
    subacks = queue.Queue()
    disconnected = threading.Event()
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id="adm-mqtt",
        protocol=mqtt.MQTTv311,
        clean_session=True,
        reconnect_on_failure=False,
    )
    client.username_pw_set(args.user, args.password)
    client.on_connect = lambda c, u, flags, rc, props: connacks.put(rc)
    client.on_subscribe = lambda c, u, mid, rcs, props: subacks.put(rcs)
    client.on_disconnect = lambda c, u, flags, rc, props: disconnected.set()
    client.connect(args.host, args.mqtt_port, keepalive=60)
    client.loop_start()
    rc = connacks.get(timeout=WAIT_SECONDS)
    if rc.is_failure:
        fail("MQTT CONNECT refused: %s" % rc)
    client.subscribe("adm/mqtt/in", qos=1)
    subacks.get(timeout=WAIT_SECONDS)
    for i in range(3):
        client.publish("adm/mqtt/out", "mqtt %d" % i, qos=1).wait_for_publish(timeout=WAIT_SECONDS)
    port = client.socket().getsockname()[1]
    return client, disconnected, port


def open_amqp(args):
    container = Container()
    container.container_id = "adm-amqp"
    url = "amqp://%s:%d" % (args.host, args.amqp_port)
    conn = BlockingConnection(
        url,
        timeout=WAIT_SECONDS,
        container=container,
        user=args.user,
        password=args.password,
        allowed_mechs="PLAIN",
    )
    receiver = conn.create_receiver("adm.amqp.in")
    sender = conn.create_sender("adm.amqp.out")
    for i in range(4):
        sender.send(Message(body="amqp %d" % i))
    return conn, receiver


def amqp_closed(conn, receiver):
    """Whether the broker closes the AMQP connection within the wait."""
    deadline = time.time() + WAIT_SECONDS
    while time.time() < deadline:
        try:
            receiver.receive(timeout=1)
        except Exception as error:  # Timeout goes on; a closed connection or link ends it
            if type(error).__name__ == "Timeout":
                continue
            return True
    return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--stomp-port", type=int, required=True)
    parser.add_argument("--mqtt-port", type=int, required=True)
    parser.add_argument("--amqp-port", type=int, required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    args = parser.parse_args()
    try:
        stomp_conn, stomp_watcher, stomp_port = open_stomp(args)
        mqtt_client, mqtt_disconnected, mqtt_port = open_mqtt(args)
        amqp_conn, amqp_receiver = open_amqp(args)
    except Exception as error:
        fail("cannot open the connections: %r" % error)
    print("ready %d %d" % (stomp_port, mqtt_port), flush=True)
    closed = {
        "stomp": lambda: stomp_watcher.disconnected.wait(WAIT_SECONDS),
        "mqtt": lambda: mqtt_disconnected.wait(WAIT_SECONDS),
        "amqp": lambda: amqp_closed(amqp_conn, amqp_receiver),
    }
    still_open = {
        "stomp": lambda: stomp_conn.is_connected() and not stomp_watcher.disconnected.is_set(),
        "mqtt": lambda: mqtt_client.is_connected() and not mqtt_disconnected.is_set(),
        "amqp": lambda: True,
    }
    for line in sys.stdin:
        words = line.split()
        if words == ["quit"]:
            break
        if len(words) != 2 or words[1] not in closed:
            fail("unknown command: %s" % line.strip())
        command, protocol = words
        if command == "closed":
            if not closed[protocol]():
                fail("the %s connection is still open after %.0f s" % (protocol, WAIT_SECONDS))
            extra = ""
            if protocol == "stomp":
                extra = " error=%s" % (stomp_watcher.errors[0] if stomp_watcher.errors else "none")
            print("ok closed %s%s" % (protocol, extra), flush=True)
        elif command == "open":
            if not still_open[protocol]():
                fail("the %s connection is closed" % protocol)
            print("ok open %s" % protocol, flush=True)
        else:
            fail("unknown command: %s" % line.strip())
    mqtt_client.loop_stop()
    print("ok quit", flush=True)


if __name__ == "__main__":
    main()
