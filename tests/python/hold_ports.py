"""Holds the well-known ports of ActiveMQ and ferromq while the test suite runs, so that a test
that relies on one being free (or talks to whatever answers there) fails on every run rather
than only on a busy machine. Each port is bound on 0.0.0.0 and [::]; a port some other program
already holds is held anyway and is skipped. Whatever connects gets a line that is no
protocol a test speaks, then the close.

    hold_ports.py [PORT...]   (default: the ports below); prints "holding ..." once bound
"""

import socket
import sys
import threading

DEFAULT_PORTS = [61616, 61613, 5672, 1883, 8161, 61614, 61617, 61612, 5671, 8883]


def bind(family, host, port):
    sock = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        return None
    sock.listen(64)
    return sock


def serve(sock):
    while True:
        try:
            connection, _ = sock.accept()
        except OSError:
            return
        try:
            connection.sendall(b"not the broker under test\n")
        except OSError:
            pass
        connection.close()


def main():
    ports = [int(port) for port in sys.argv[1:]] or DEFAULT_PORTS
    held, taken = [], []
    for port in ports:
        sockets = [bind(socket.AF_INET, "0.0.0.0", port)]
        if socket.has_ipv6:
            sockets.append(bind(socket.AF_INET6, "::", port))
        sockets = [sock for sock in sockets if sock is not None]
        (held if sockets else taken).append(port)
        for sock in sockets:
            threading.Thread(target=serve, args=(sock,), daemon=True).start()
    note = " (already held elsewhere: %s)" % taken if taken else ""
    print("holding %s%s" % (held, note), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
