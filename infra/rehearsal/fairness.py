"""Fair turns at load (issue 25): once tenant A's whole burst is queued, tenant B uploads
one photo, and the load rehearsal reports B's wait in A's photos against A's backlog.
Oldest first, B waits behind the whole backlog (a ratio of 1); taking turns between
tenants, about one batch."""

import threading
import time
from dataclasses import dataclass, field

from common import log


@dataclass
class TenantTurn:
    """Tenant B's one photo: when it was uploaded, A's photos not yet servable then,
    and the seconds until it was servable (None while waiting)."""
    uploaded_at: float
    backlog: int
    seconds: float = None
    watcher: threading.Thread = field(default=None, repr=False)


class FairTurns:
    """Mixed into `load.LoadRehearsal` (its `http`, `servable`, `put_bytes`, `report`)."""

    def second_tenant_photo(self, data, busy_pid):
        """Tenant B (its own admin key) uploads `data` as one photo while A's project
        `busy_pid` is busy; a thread watches it become servable."""
        key = self.create_api_key("load-tenant-b")
        s, p = self.http("POST", "/v1/projects", {"name": "load-fair-b"}, key=key)
        assert s == 201, (s, p)
        pid = p["project_id"]
        self.recorder.stats.scopes[pid] = "<project>"
        self.recorder.stats.scopes["load-tenant-b"] = "<tenant>"
        done, _, _ = self.servable(busy_pid)
        turn = TenantTurn(uploaded_at=time.time(), backlog=self.args.photos - done)
        self.put_bytes(pid, "tenant-b.jpg", data, key=key)

        def watch():
            until = time.time() + self.patience()
            while time.time() < until:
                if self.servable(pid)[0] >= 1:
                    turn.seconds = time.time() - turn.uploaded_at
                    return
                time.sleep(1)
        turn.watcher = threading.Thread(target=watch, daemon=True)
        turn.watcher.start()
        return turn

    def patience(self):
        """How long a photo may take to become servable at this load."""
        return max(900, 4 * self.args.photos)

    def report_fair_turns(self, turn):
        """After the burst phase: B's wait in A's photos, A's throughput being the
        backlog B found over the time from B's upload to A's last photo servable."""
        turn.watcher.join(timeout=self.patience())
        if turn.seconds is None:
            self.fail("the second tenant's photo was never servable")
            return
        rate = turn.backlog / max(self.phases["burst"][1] - turn.uploaded_at, 1e-9)
        waited = turn.seconds * rate
        self.report["scenarios"]["fair_turns"] = {
            "b_seconds_to_servable": round(turn.seconds, 1),
            "a_photos_per_s": round(rate, 3),
            "b_wait_in_a_photos": round(waited, 1),
            "a_backlog_when_b_uploaded": turn.backlog,
            "b_wait_over_backlog": round(waited / max(turn.backlog, 1), 3),
        }
        log(f"fair turns: tenant B's one photo servable in {turn.seconds:.1f}s = {waited:.1f} of A's photos, "
            f"with {turn.backlog} of A's waiting when it was uploaded")
