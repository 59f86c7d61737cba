#!/usr/bin/env python3
"""Do two ranks that send to each other at once overlap on this network?

Run by netns.sh in two namespaces (or by hand with NODE_RANK and MASTER_ADDR
set, over loopback), with plain sockets and busy-polling receivers, no gotree:

    tests/netns/netns.sh run 2 -- python3 tests/netns/exchange.py [BYTES]

Times two patterns of the same two messages per iteration:
  one-way: rank 1 sends, rank 0 receives, then rank 0 sends, rank 1
           receives (a tree of two: each hop has an idle receiver);
  exchange: both send, then both receive (a ring step of two), twice.
If the network carried both directions at once, an exchange step would take
about one hop and an iteration of each pattern the same time. Rank 0 prints
the microseconds per iteration of each; `gotree sim --serial-net` models a
network where the exchange takes twice as long (docs/crossover/netns).
"""

import os
import socket
import sys
import time

PORT = 29778


def connect(rank, addr):
    if rank == 0:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, PORT))
        ls.listen(1)
        ls.settimeout(30)
        s, _ = ls.accept()
        ls.close()
    else:
        deadline = time.monotonic() + 30
        while True:
            try:
                s = socket.create_connection((addr, PORT), timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    return s


def main():
    rank = int(os.environ["NODE_RANK"])
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    iters, warm = 20000, 1000
    s = connect(rank, addr)
    buf = b"x" * size
    deadline = time.monotonic() + 120

    def waited(what):
        if time.monotonic() > deadline:
            sys.exit(f"exchange.py: the peer did not {what} within 120 s")

    def send():
        view = memoryview(buf)
        while view:
            try:
                view = view[s.send(view):]
            except BlockingIOError:
                waited("take data")

    def recv():
        got = 0
        while got < size:
            try:
                b = s.recv(size - got)
            except BlockingIOError:
                waited("send data")
                continue
            if not b:
                sys.exit("exchange.py: the peer closed the connection")
            got += len(b)

    def one_way():
        if rank == 1:
            send()
            recv()
        else:
            recv()
            send()

    def exchange():
        for _ in range(2):
            send()
            recv()

    out = []
    for name, it in (("one-way", one_way), ("exchange", exchange)):
        for _ in range(warm):
            it()
        t = time.perf_counter()
        for _ in range(iters):
            it()
        out.append(f"{name} {(time.perf_counter() - t) / iters * 1e6:.1f} us")
    if rank == 0:
        print(f"{size} B messages, per iteration of two messages each way: " + ", ".join(out))


if __name__ == "__main__":
    main()
