"""The notices scenario of the deploy rehearsal: a webhook whose receiver on 127.0.0.1 is
down, then answers 500, then 200, and an operator's rule on the default event bus; both
get the photo's notices through the deployed functions."""

import json
import time

from common import STACK, free_port, log
from webhook_receiver import Receiver, signed


class NoticeScenarios:
    """Mixed into `rehearse.Rehearsal` (its `http`, `wait`, `check`, `op` clients)."""

    def scenario_webhooks(self):
        """A webhook whose receiver on 127.0.0.1 is down, then answers 500 once, then 200:
        the photo's notices arrive through the deployed functions, signed, with the id of
        the refused try repeated on the retry."""
        port = free_port()
        s, p = self.http("POST", "/v1/projects", {"name": "rehearsal-webhooks"})
        self.check(s == 201, f"webhook project: {s} {p}")
        # This project's notices only: the other scenarios run in the same tenant.
        s, hook = self.http("POST", "/v1/x-tessera/webhooks",
                            {"url": f"http://127.0.0.1:{port}/hook", "project_id": p["project_id"]})
        self.check(s == 201, f"create a webhook: {s} {hook}")
        if s != 201:
            return
        # The functions other scenarios keep warm read this tenant's webhooks at most
        # every 10 s (tessera_engine::notify::WEBHOOK_CACHE): a webhook is live for
        # every function after that.
        time.sleep(11)
        bus_tap = self.tap_event_bus()
        photo = self.presigned_put(p["project_id"], "camera.png")
        deliveries = f"/v1/x-tessera/webhooks/{hook['id']}/deliveries"
        tried = self.wait("a delivery tried against the closed port", lambda: any(
            "could not be reached" in (i.get("last_error") or "") for i in self.http("GET", deliveries)[1]["items"]), 240)
        self.check(tried, f"no delivery was tried while the receiver was down: {self.http('GET', deliveries)}")
        receiver = Receiver(port)
        received = receiver.received
        try:
            def done():
                items = self.http("GET", deliveries)[1]["items"]
                published = any(json.loads(b).get("type") == "photo.published" and st == 200 for _, b, st in received)
                return published and items and all(i["state"] == "succeeded" for i in items)
            ok = self.wait("every notice delivered", done, 240)
            self.check(ok, f"notices not delivered: {self.http('GET', deliveries)[1]} received {[(st, b[:200]) for _, b, st in received]}")
        finally:
            receiver.stop()
        for headers, body, _ in received:
            self.check(signed(hook["secret"], headers, body), f"a delivery's signature does not verify: {headers}")
            self.check(json.loads(body)["data"].get("photo_id") in (None, photo), f"a notice about another photo: {body[:300]}")
        if received:
            first = received[0][0]["tessera-webhook-id"]
            again = [st for h, _, st in received[1:] if h["tessera-webhook-id"] == first]
            self.check(200 in again, f"the delivery answered 500 ({first}) was not delivered again under its id")
        self.report["webhooks"] = {"requests": len(received), "delivered": sum(st == 200 for _, _, st in received)}
        log(f"webhooks: {len(received)} requests, {self.report['webhooks']['delivered']} delivered")
        # The same notices are events on the default bus, where an operator's rule found them.
        events = []

        def bus_has_photo_published():
            for m in self.op.sqs.receive_message(QueueUrl=bus_tap, MaxNumberOfMessages=10).get("Messages", []):
                events.append(json.loads(m["Body"]))
                self.op.sqs.delete_message(QueueUrl=bus_tap, ReceiptHandle=m["ReceiptHandle"])
            return any(e.get("detail-type") == "photo.published" and e["detail"]["data"].get("photo_id") == photo
                       for e in events)
        ok = self.wait("photo.published on the default event bus", bus_has_photo_published, 60)
        self.check(ok, f"no photo.published event for {photo} on the bus: {[e.get('detail-type') for e in events]}")
        for e in events:
            self.check(e.get("source") == f"tessera.{STACK}", f"an event from source {e.get('source')}")
        self.report["events"] = {"received": len(events)}

    def tap_event_bus(self):
        """An operator's rule on the default bus forwarding this stack's events to a queue;
        the queue's URL."""
        url = self.op.sqs.create_queue(QueueName="operator-bus-tap")["QueueUrl"]
        arn = self.op.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.op.events.put_rule(Name="tessera-notices", EventBusName="default",
                                EventPattern=json.dumps({"source": [f"tessera.{STACK}"]}))
        self.op.events.put_targets(Rule="tessera-notices", EventBusName="default",
                                   Targets=[{"Id": "tap", "Arn": arn}])
        return url
