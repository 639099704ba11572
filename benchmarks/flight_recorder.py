#!/usr/bin/env python3
"""What the flight recorder costs a service: requests per second of an HTTP server on
localhost, answering for a fixed time, untraced, with ``record --flight-recorder`` on
the service's own functions, and with ``record`` to a file on the same functions.

The service (this file, ``--child SECONDS``) is http.server's ThreadingHTTPServer whose
handler does a little application work per request (parse the query, price a cart of
Python objects, encode JSON); a client thread in the same process sends requests on a
keep-alive connection for SECONDS and the process prints how many were answered.  The
application's functions are ``__main__``'s (``-F '__main__.*'``): http.server and
socketserver are not traced, as a service would trace its own code.

    python benchmarks/flight_recorder.py [--seconds 3] [--runs 3]

The configurations run interleaved (run 1 of each, then run 2 ...); the table gives the
median requests/s and its ratio to untraced.  Target (issue 31): the recorder costs at
most 10% of the requests/s.

A second table: the peak RSS of a program making 10^6 and then 10^7 calls under the
recorder (``--child-calls N``): the buffers overwrite, so the memory does not grow with
the calls.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


# -- the service ----------------------------------------------------------------------
class Item:
    def __init__(self, name, price, qty):
        self.name = name
        self.price = price
        self.qty = qty

    def total(self):
        return self.price * self.qty


def parse_query(path):
    out = {}
    _, _, q = path.partition("?")
    for part in q.split("&"):
        k, _, v = part.partition("=")
        if k:
            out[k] = v
    return out


def price_cart(items, coupon):
    subtotal = sum(i.total() for i in items)
    if coupon == "SAVE10":
        subtotal = subtotal * 90 // 100
    return subtotal


def handle_request(path):
    import json
    q = parse_query(path)
    n = int(q.get("n", "5"))
    items = [Item(f"item{i}", 100 + i, 1 + i % 3) for i in range(n)]
    return json.dumps({"total": price_cart(items, q.get("coupon")), "n": n}).encode()


def tiny(i):
    return i


def calls(n):
    import resource
    for i in range(n):
        tiny(i)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def serve(seconds):
    import http.client
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # one segment per response, sent at once: else the body waits for the
        # client's delayed ACK of the headers (Nagle), 40 ms a request
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def do_GET(self):
            body = handle_request(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1])
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        conn.request("GET", "/cart?n=8&coupon=SAVE10")
        r = conn.getresponse()
        r.read()
        done += 1
    conn.close()
    srv.shutdown()
    print(done / seconds)


# -- the driver -----------------------------------------------------------------------
CONFIGS = ("untraced", "flight", "record")
LABELS = {"untraced": "untraced",
          "flight": "fntrace record --flight-recorder 4096 -F '__main__.*'",
          "record": "fntrace record -p function_graph -F '__main__.*' -o FILE"}


def _cmd(py, config, seconds, tmp):
    me = os.path.abspath(__file__)
    child = [me, "--child", str(seconds)]
    if config == "untraced":
        return [py, *child]
    if config == "flight":
        return [py, "-m", "fntrace.cli.main", "record", "--flight-recorder", "4096",
                "-F", "__main__.*", "--dump-dir", tmp, *child]
    return [py, "-m", "fntrace.cli.main", "record", "-p", "function_graph", "-F",
            "__main__.*", "-o", os.path.join(tmp, "svc.dat"), *child]


def main(argv=None):
    import argparse
    import statistics
    import subprocess
    import tempfile
    sys.path.insert(0, HERE)
    import _common
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    env = _common.child_env({"FNTRACE_PURE": "0"})
    info = _common.probe(args.python, env)
    res = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="fntrace-flight-") as tmp:
        for _ in range(args.runs):
            for c in CONFIGS:
                p = subprocess.run(_cmd(args.python, c, args.seconds, tmp), env=env,
                                   capture_output=True, text=True, check=True)
                res[c].append(float(p.stdout.split()[-1]))
        dumps = [n for n in os.listdir(tmp) if n.startswith("fntrace-")]
    base = statistics.median(res["untraced"])
    print(f"Python {info['version']} ({info['backend']}, "
          f"{'native' if info['native'] else 'pure'} hot path): requests/s over "
          f"{args.seconds:g} s, median of {args.runs} interleaved runs\n")
    print("| configuration | requests/s | vs untraced |")
    print("|---|---:|---:|")
    for c in CONFIGS:
        m = statistics.median(res[c])
        print(f"| {LABELS[c]} | {m:,.0f} | {m / base:.3f}x |")
    if dumps:
        print(f"\n(unexpected: {len(dumps)} dumps written)")
    print("\n| calls under --flight-recorder 4096 | peak RSS |\n|---:|---:|")
    me = os.path.abspath(__file__)
    for n in (10 ** 6, 10 ** 7):
        with tempfile.TemporaryDirectory(prefix="fntrace-flight-") as tmp:
            p = subprocess.run([args.python, "-m", "fntrace.cli.main", "record",
                                "--flight-recorder", "4096", "-F", "__main__.tiny",
                                "--dump-dir", tmp, me, "--child-calls", str(n)],
                               env=env, capture_output=True, text=True, check=True)
        print(f"| {n:,} | {int(p.stdout.split()[-1]) / 1024:,.1f} MiB |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        serve(float(sys.argv[2]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "--child-calls":
        calls(int(sys.argv[2]))
    else:
        sys.exit(main())
