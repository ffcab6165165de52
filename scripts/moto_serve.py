"""moto_server for Tessera's tests, with DynamoDB requests serialised.

moto handles requests on several threads and does not lock its DynamoDB tables, so two
concurrent conditional writes to one item can both pass their condition; DynamoDB
itself serialises them. The port conformance suite catches this (a concurrent counter
lost 13 of 60 increments), so this launcher runs DynamoDB requests one at a time and
everything else (S3, SQS long polls) concurrently, as moto_server does.

Usage: python moto_serve.py HOST PORT
"""

import sys
import threading

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

app = DomainDispatcherApplication(create_backend_app)
dynamodb = threading.Lock()


def serialised(environ, start_response):
    if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
        with dynamodb:
            # Drain the response inside the lock: moto computes it lazily.
            return [b"".join(app(environ, start_response))]
    return app(environ, start_response)


if __name__ == "__main__":
    run_simple(sys.argv[1], int(sys.argv[2]), serialised, threaded=True)
