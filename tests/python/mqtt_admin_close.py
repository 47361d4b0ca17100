#!/usr/bin/env python3
"""An MQTT client (paho-mqtt) with a will, which the admin endpoint's close of its
connection must publish (tests/tests/integration/admin_connections.rs):

    mqtt_admin_close.py --host 127.0.0.1 --port P --version 3|5 --client-id ID

A watcher subscribes (QoS 1) to wills/ID; the client connects with the will "gone" (QoS 1)
on that topic; then "ready" is printed. Once the broker closes the client's connection (20 s
at most), it prints "closed reason=R will=W": R the 5.0 DISCONNECT's reason code (152,
Administrative action) or "none" for 3.1.1, which has no server DISCONNECT; W the will's
payload as the watcher received it, or "none".

Anything wrong prints "FAIL why" and exits with status 1.
"""

import argparse
import sys
import threading

try:
    import paho.mqtt.client as mqtt
except ImportError:
    sys.stderr.write("paho-mqtt is not installed: run scripts/test\n")
    sys.exit(2)

WAIT = 20.0


def fail(why):
    print(f"FAIL {why}", flush=True)
    sys.exit(1)


def client(client_id, version):
    protocol = mqtt.MQTTv5 if version == "5" else mqtt.MQTTv311
    return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--version", choices=["3", "5"], required=True)
    parser.add_argument("--client-id", required=True)
    args = parser.parse_args()
    topic = f"wills/{args.client_id}"

    subscribed, will = threading.Event(), threading.Event()
    received = []
    watcher = client(f"{args.client_id}-watcher", args.version)
    watcher.on_subscribe = lambda *_: subscribed.set()

    def on_message(_client, _userdata, message):
        received.append(message.payload.decode())
        will.set()

    watcher.on_message = on_message
    watcher.connect(args.host, args.port)
    watcher.loop_start()
    watcher.subscribe(topic, qos=1)
    if not subscribed.wait(WAIT):
        fail("the watcher's SUBSCRIBE was not answered")

    connected, closed = threading.Event(), threading.Event()
    reasons = []
    doomed = client(args.client_id, args.version)
    doomed.will_set(topic, "gone", qos=1)
    doomed.on_connect = lambda *_: connected.set()

    def on_disconnect(_client, _userdata, _flags, reason, _properties):
        reasons.append(reason)
        closed.set()

    doomed.on_disconnect = on_disconnect
    doomed.connect(args.host, args.port)
    doomed.loop_start()
    if not connected.wait(WAIT):
        fail("no CONNACK")
    print("ready", flush=True)

    if not closed.wait(WAIT):
        fail("the broker did not close the connection")
    doomed.loop_stop()
    reason = "none"
    if args.version == "5" and reasons:
        reason = str(getattr(reasons[0], "value", reasons[0]))
    will.wait(WAIT)
    print(f"closed reason={reason} will={received[0] if received else 'none'}", flush=True)
    watcher.loop_stop()
    watcher.disconnect()


if __name__ == "__main__":
    main()
