"""A Python client generated from openapi.yaml by openapi-python-client, used as it is, against a real server.

Run by `GeneratedClientTests` (swift test): it generates the client into a scratch folder, imports it, and drives
push (applied, duplicate, rejected), pull with a cursor, snapshot with a continuation, heartbeat and the monitor,
with the times written as Python writes them (microseconds and an offset). Prints one line per check and
`all checks passed` at the end; any failure exits non-zero with its reason.
"""

import argparse
import datetime
import subprocess
import sys
import time
import uuid

parser = argparse.ArgumentParser()
parser.add_argument("--openapi", required=True)
parser.add_argument("--output", required=True)
parser.add_argument("--server", required=True)
parser.add_argument("--staff", required=True)
parser.add_argument("--organizer", required=True)
parser.add_argument("--declared", required=True, help="a collection the server's operator declared")
args = parser.parse_args()

generated = subprocess.run(
    ["openapi-python-client", "generate", "--path", args.openapi, "--output-path", args.output, "--overwrite"],
    capture_output=True,
    text=True,
)
if generated.returncode != 0:
    sys.exit(f"openapi-python-client failed:\n{generated.stdout}\n{generated.stderr}")
sys.path.insert(0, args.output)

from outpost_sync_protocol_client import AuthenticatedClient  # noqa: E402
from outpost_sync_protocol_client.api.default import heartbeat, monitor, pull, push, snapshot  # noqa: E402
from outpost_sync_protocol_client.models import (  # noqa: E402
    Heartbeat,
    Mutation,
    MutationFieldsType0,
    MutationOp,
    PushRequest,
)


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}", flush=True)


staff = AuthenticatedClient(base_url=args.server, token=args.staff, raise_on_unexpected_status=True)
organizer = AuthenticatedClient(base_url=args.server, token=args.organizer, raise_on_unexpected_status=True)
device = "py-" + uuid.uuid4().hex[:8]
now = datetime.datetime.now(datetime.timezone.utc)
east = datetime.timezone(datetime.timedelta(hours=5, minutes=30))


def mutation(key, record, values, at, collection="notes", scope=None, op=MutationOp.UPSERT):
    fields = MutationFieldsType0.from_dict(values)
    extra = {"scope": scope} if scope is not None else {}
    return Mutation(
        idempotency_key=key, collection=collection, record_id=record, op=op, fields=fields, client_timestamp=at, **extra
    )


def pulled(client, collection, records, cursor=None):
    """Pulls until the page holds `records`, as a client polls: on PostgreSQL a change shows once every transaction
    that began before it has ended, in the whole cluster (the gap-free rule)."""
    deadline = time.monotonic() + 30
    while True:
        extra = {"cursor": cursor} if cursor else {}
        page = pull.sync(client=client, collection=collection, limit=1000, **extra)
        if set(records) <= {change.record_id for change in page.changes} or time.monotonic() > deadline:
            return page
        time.sleep(0.05)


def results(client, mutations, device_id=device):
    answer = push.sync(client=client, body=PushRequest(device_id=device_id, mutations=mutations))
    return [(result.status.value, result.error.code if result.error else None) for result in answer.results]


# Push: applied, the same mutation again (its time written in another zone) a duplicate, a bad record id rejected.
first = mutation(f"{device}:n1:1", "n1", {"text": "gate B open"}, now)
check(results(staff, [first]) == [("applied", None)], "push: applied, with a time of microseconds and +00:00")
again = mutation(f"{device}:n1:1", "n1", {"text": "gate B open"}, now.astimezone(east))
check(results(staff, [again]) == [("duplicate", None)], "push: the same mutation with its time in +05:30 is a duplicate")
whole = mutation(f"{device}:n1:2", "n1", {"text": "whole second"}, (now - datetime.timedelta(minutes=1)).replace(microsecond=0))
check(results(staff, [whole]) == [("applied", None)], "push: a time with no fraction is applied")
bad = mutation(f"{device}:bad:1", "not an id", {"text": "x"}, now)
check(results(staff, [bad]) == [("rejected", "invalid_record_id")], "push: a bad record id is rejected with its code")

# Last write wins by instant, not by the text: the later write reads as the earlier hour in its own zone.
later = now - datetime.timedelta(hours=1)
earlier = (now - datetime.timedelta(hours=2)).astimezone(east)
check(str(earlier.isoformat()) > str(later.isoformat()), "the earlier write's text sorts after the later's")
check(
    results(staff, [mutation(f"{device}:n2:late", "n2", {"v": "later"}, later)]) == [("applied", None)],
    "push: the later write",
)
results(staff, [mutation(f"{device}:n2:early", "n2", {"v": "earlier"}, earlier)])

# Pull from the start, then from the cursor: nothing new, then exactly the next write.
page = pulled(staff, "notes", ["n1", "n2"])
records = {change.record_id: change for change in page.changes}
check(records["n1"].fields.additional_properties == {"text": "gate B open"}, "pull: a write a minute older did not win")
check(records["n2"].fields.additional_properties == {"v": "later"}, "pull: the later instant won, whatever its zone")
check(records["n1"].created_at.tzinfo is not None, "pull: times decode as aware datetimes")
results(staff, [mutation(f"{device}:n3:1", "n3", {"text": "next"}, now)])
following = pulled(staff, "notes", ["n3"], cursor=page.cursor)
check("n3" in {change.record_id for change in following.changes} and "n3" not in records,
      "pull from the cursor: the next write, which the first page did not hold")

# A collection the operator declared is named like any other.
declared = [mutation(f"{device}:d1:1", "d1", {"site": "north"}, now, collection=args.declared)]
check(results(staff, declared) == [("applied", None)], f"push to the declared collection {args.declared}")
declared_page = pulled(staff, args.declared, ["d1"])
check([change.record_id for change in declared_page.changes] == ["d1"], f"pull of {args.declared}")

# Snapshot: five guests of an event in pages of two, followed by their continuations.
guests = [
    mutation(f"import:gala:g{i}", f"g{i}", {"event_id": "gala", "name": f"Guest {i}", "status": "registered"}, now,
             collection="guests", scope="gala")
    for i in range(5)
]
check(all(status == "applied" for status, _ in results(organizer, guests, "py-admin")), "push: five guests")
seen, continuation, pages = [], None, 0
while True:
    extra = {"continuation": continuation} if continuation else {}
    answer = snapshot.sync(client=staff, collection="guests", scope="gala", limit=2, **extra)
    pages += 1
    seen += [record.record_id for record in answer.records]
    if not isinstance(answer.continuation, str):
        break
    continuation = answer.continuation
check(seen == [f"g{i}" for i in range(5)] and pages == 3, "snapshot: three pages joined by continuations")
check(isinstance(answer.cursor, str), "snapshot: the last page carries the cursor to pull from")

# Heartbeat with the event and Python's own time, then the organizer sees the device on the event's monitor.
beat = Heartbeat(
    device_id=device, pending_count=0, failed_count=0, app_version="python/1", event="gala",
    last_roster_fetch=now.astimezone(east),
)
check(isinstance(heartbeat.sync(client=staff, body=beat).fingerprint, str), "heartbeat: answered with a fingerprint")
board = monitor.sync(client=organizer, event="gala")
check(any(row.app_version == "python/1" and row.last_roster_fetch is not None for row in board.devices),
      "monitor: the device is listed under its event")

print("all checks passed", flush=True)
