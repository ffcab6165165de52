"""A webhook receiver on 127.0.0.1 for the rehearsal: answers the first request 500 and
every later one 200, records each (headers with lower-case names, body, status), and
checks a request's signature as the receiver in docs/notifications.md does."""

import hashlib
import hmac
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, port):
        self.received = []  # (headers, body, status answered)
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                status = 500 if not received else 200
                received.append(({k.lower(): v for k, v in self.headers.items()}, body, status))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


def signed(secret, headers, body):
    """Whether `body` with `headers` carries the signature of `secret`."""
    mac = hmac.new(secret.encode(), f"{headers['tessera-webhook-id']}.{headers['tessera-webhook-timestamp']}.".encode() + body,
                   hashlib.sha256).hexdigest()
    return headers.get("tessera-webhook-signature") == f"v1={mac}"
