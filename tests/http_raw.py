#!/usr/bin/env python3
"""Raw HTTP over a TCP socket to 127.0.0.1, for what curl cannot send: malformed
framing, half-closed sockets, slow and idle connections, connections from
several loopback addresses. Used by test_server_hardening.sh and
test_server_slowloris.sh.

  http_raw.py send PORT [--shut-wr] [--wait S] [--from ADDR]
      sends stdin as is (after shutdown(SHUT_WR) with --shut-wr) and prints what
      the server answers until it closes the connection; exit 3 if it is still
      open after S seconds (default 10). --from binds the client socket to
      ADDR (another loopback address such as 127.0.0.2).
  http_raw.py slow PORT N INTERVAL BOUND
      opens N connections that each send the start of a request and then one
      header byte every INTERVAL seconds; prints, per connection, the seconds
      until the server closed it. Exit 0 if the server closed all of them within
      BOUND seconds, 1 otherwise.
  http_raw.py per-ip PORT LIMIT
      opens LIMIT idle connections and one more; exit 0 if the server closes the
      extra one within 10 s and still answers GET /health on the first LIMIT.
  http_raw.py wave PORT SOURCES PER INTERVAL BOUND
      opens PER connections from each address of SOURCES (comma-separated),
      taking the addresses in turn, each sending the start of a request's
      headers; prints "opened N" once all are open, then sends one header byte
      on each every INTERVAL seconds, and prints "open N" after each round
      with the number the server has not closed. Exit 0 once the server has
      closed all of them, 1 if some are still open after BOUND seconds (then
      it closes them).
  http_raw.py leave PORT close|shut-wr
      sends stdin as is, waits (30 s at most) until GET /health reports a busy
      slot (the request is running), then closes the socket (close: a FIN, no
      reset) or half-closes it (shut-wr) and prints what the server sends
      until it closes the connection. Exit 1 if no slot became busy.
  http_raw.py hold-post PORT ADDR XFF N BOUND
      opens N connections from ADDR, each sending a POST whose headers carry
      X-Forwarded-For: XFF and whose body stops short of its Content-Length;
      prints "sent N" and holds them until the server closes them or BOUND
      seconds pass.
"""
import json
import socket
import sys
import time

HOST = "127.0.0.1"


def connect(port, source=None):
    return socket.create_connection((HOST, port), timeout=10, source_address=(source, 0) if source else None)


def say(line):
    print(line, flush=True)


def closed_by_server(s, wait):
    """Reads until the server closes s (EOF or reset): True, or False after wait seconds."""
    end = time.monotonic() + wait
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(left)
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True


def cmd_send(port, args):
    shut = "--shut-wr" in args
    wait = float(args[args.index("--wait") + 1]) if "--wait" in args else 10.0
    source = args[args.index("--from") + 1] if "--from" in args else None
    data = sys.stdin.buffer.read()
    s = connect(port, source)
    s.sendall(data)
    if shut:
        s.shutdown(socket.SHUT_WR)
    out = b""
    end = time.monotonic() + wait
    rc = 0
    while True:
        left = end - time.monotonic()
        if left <= 0:
            rc = 3
            break
        s.settimeout(left)
        try:
            b = s.recv(65536)
        except socket.timeout:
            rc = 3
            break
        except ConnectionResetError:
            break
        if not b:
            break
        out += b
    s.close()
    sys.stdout.buffer.write(out)
    return rc


def cmd_slow(port, n, interval, bound):
    start = time.monotonic()
    conns = []
    for _ in range(n):
        s = connect(port)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        s.setblocking(False)
        conns.append(s)
    closed = [None] * n
    while time.monotonic() - start < bound and None in closed:
        time.sleep(interval)
        for i, s in enumerate(conns):
            if closed[i] is not None:
                continue
            try:
                if s.recv(65536) == b"":
                    closed[i] = time.monotonic() - start
                    continue
            except BlockingIOError:
                pass
            except (ConnectionResetError, BrokenPipeError):
                closed[i] = time.monotonic() - start
                continue
            try:
                s.send(b"a")
            except (ConnectionResetError, BrokenPipeError):
                closed[i] = time.monotonic() - start
    for s in conns:
        s.close()
    print(" ".join("open" if c is None else "%.1f" % c for c in closed))
    return 0 if None not in closed else 1


def cmd_per_ip(port, limit):
    held = [connect(port) for _ in range(limit)]
    time.sleep(0.5)  # let the server register them before the extra one arrives
    extra = connect(port)
    ok = closed_by_server(extra, 10)
    extra.close()
    print("extra connection closed by the server" if ok else "extra connection still open")
    s = held[0]
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    s.settimeout(10)
    answer = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            answer += b
    except (socket.timeout, ConnectionResetError):
        pass
    first = answer.split(b"\r\n", 1)[0].decode("latin-1")
    print("held connection answered: " + first)
    for h in held:
        h.close()
    return 0 if ok and first.startswith("HTTP/1.1 200") else 1


def gone(s):
    """Whether the server closed non-blocking socket s (it sends nothing before)."""
    try:
        return s.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def cmd_wave(port, sources, per, interval, bound):
    start = time.monotonic()
    conns = []
    for _ in range(per):
        for src in sources.split(","):
            s = connect(port, src)
            try:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            except OSError:
                pass  # refused at once: the server closed it already
            s.setblocking(False)
            conns.append(s)
    say("opened %d" % len(conns))
    open_ = set(range(len(conns)))
    while open_ and time.monotonic() - start < bound:
        time.sleep(interval)
        for i in sorted(open_):
            if gone(conns[i]):
                open_.discard(i)
                continue
            try:
                conns[i].send(b"a")
            except OSError:
                open_.discard(i)
        say("open %d" % len(open_))
    for s in conns:
        s.close()
    say("closed by the server: %d of %d" % (len(conns) - len(open_), len(conns)))
    return 0 if not open_ else 1


def busy_slots(port):
    """slots_busy of GET /health on a connection of its own."""
    s = connect(port)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1]).get("slots_busy", 0)


def cmd_leave(port, how):
    data = sys.stdin.buffer.read()
    s = connect(port)
    s.sendall(data)
    end = time.monotonic() + 30
    while busy_slots(port) == 0:
        if time.monotonic() > end:
            say("no slot became busy")
            s.close()
            return 1
        time.sleep(0.01)
    if how == "close":
        s.close()
        return 0
    s.shutdown(socket.SHUT_WR)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    sys.stdout.buffer.write(out)
    return 0


def cmd_hold_post(port, source, xff, n, bound):
    body = b'{"prompt":"held","max_tokens":1}'
    head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "X-Forwarded-For: %s\r\nContent-Length: %d\r\n\r\n" % (xff, len(body))).encode()
    conns = []
    for _ in range(n):
        s = connect(port, source)
        s.sendall(head + body[:5])
        s.setblocking(False)
        conns.append(s)
    say("sent %d" % n)
    end = time.monotonic() + bound
    while conns and time.monotonic() < end:
        time.sleep(0.2)
        conns = [s for s in conns if not gone(s) or s.close()]
    for s in conns:
        s.close()
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, port, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if cmd == "send":
        return cmd_send(port, args)
    if cmd == "slow":
        return cmd_slow(port, int(args[0]), float(args[1]), float(args[2]))
    if cmd == "per-ip":
        return cmd_per_ip(port, int(args[0]))
    if cmd == "wave":
        return cmd_wave(port, args[0], int(args[1]), float(args[2]), float(args[3]))
    if cmd == "leave":
        return cmd_leave(port, args[0])
    if cmd == "hold-post":
        return cmd_hold_post(port, args[0], args[1], int(args[2]), float(args[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
