#!/usr/bin/env python3
"""server-limits.py — what hostile clients cost `unmask-cli serve`:
the server's peak memory under three 300 MB bodies (chunked; to a foreign
Host; a GET /health carrying one), each sent until the server answers or
the body is out, and how long a connection that sends half a request head
and then nothing is kept open.

    tests/tools/server-limits.py UNMASK_CLI MODEL [--idle-limit SECONDS]

127.0.0.1 only. The peak is /proc/PID/status's VmHWM, reset before each
body through /proc/PID/clear_refs (Linux >= 4.0), minus the resident size
right after the reset.
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import time

BODY = 300_000_000
BLOCK = b" " * 65536


def vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(key)


def reset_peak(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def answered(s):
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def flood(port, head, chunked):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    s.sendall(head)
    sent = 0
    t0 = time.monotonic()
    try:
        while sent < BODY and not answered(s):
            if chunked:
                s.sendall(b"10000\r\n" + BLOCK + b"\r\n")
            else:
                s.sendall(BLOCK)
            sent += len(BLOCK)
        if chunked and sent >= BODY:
            s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    status = 0
    try:
        data = s.recv(4096)
        m = re.match(rb"HTTP/1\.1 (\d+)", data)
        status = int(m.group(1)) if m else 0
    except OSError:
        pass
    s.close()
    return status, sent, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("model")
    ap.add_argument("--idle-limit", type=float, default=90)
    a = ap.parse_args()
    env = dict(os.environ, UNMASK_DEVICE="cpu")
    p = subprocess.Popen([a.cli, "serve", "--model", a.model, "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=env, text=True)
    port = None
    for line in p.stdout:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("the server did not start")
    try:
        # Loaded: wait for /health.
        for _ in range(600):
            try:
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    break
            except OSError:
                pass
            time.sleep(0.1)
        cases = [
            ("chunked POST", b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", True),
            ("300 MB POST, foreign Host", b"POST /v1/chat/completions HTTP/1.1\r\nHost: evil.example\r\n"
             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % BODY, False),
            ("GET /health with 300 MB", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Content-Length: %d\r\n\r\n" % BODY, False),
        ]
        print(f"unmask-cli serve pid {p.pid}, port {port}, RSS {vm(p.pid, 'VmRSS') >> 20} MiB")
        for name, head, chunked in cases:
            reset_peak(p.pid)
            base = vm(p.pid, "VmRSS")
            status, sent, secs = flood(port, head, chunked)
            time.sleep(0.2)
            peak = vm(p.pid, "VmHWM")
            print(f"{name}: answered {status or 'nothing'} after {sent / 1e6:.1f} MB sent ({secs:.2f} s); "
                  f"server peak +{(peak - base) / 2**20:.1f} MiB")
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
        s.settimeout(a.idle_limit)
        t0 = time.monotonic()
        try:
            while s.recv(4096):
                pass
            print(f"half a head: closed by the server after {time.monotonic() - t0:.1f} s")
        except socket.timeout:
            print(f"half a head: still open after {a.idle_limit:.0f} s")
        except OSError as e:
            print(f"half a head: {e} after {time.monotonic() - t0:.1f} s")
        s.close()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.settimeout(a.idle_limit)
        t0 = time.monotonic()
        try:
            while s.recv(4096):
                pass
            print(f"kept-alive after an answer: closed by the server after {time.monotonic() - t0:.1f} s")
        except socket.timeout:
            print(f"kept-alive after an answer: still open after {a.idle_limit:.0f} s")
        s.close()
    finally:
        p.terminate()
        p.wait(10)


if __name__ == "__main__":
    main()
