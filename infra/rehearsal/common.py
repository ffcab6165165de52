"""What every rehearsal module shares: where the repository and the shared data are, the
stack's name, the log line, a free local port."""

import os
import socket
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.abspath(os.path.join(REPO, "..", "shared"))
CACHE = os.environ.get("TESSERA_CACHE", os.path.expanduser("~/.cache/tessera"))
STACK = "tessera"


def log(msg):
    print(f"[rehearsal {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
