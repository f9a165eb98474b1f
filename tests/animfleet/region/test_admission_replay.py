"""The admission script called twice with one nonce (its reply lost, the call resent): the
second call answers what the first did and writes nothing; on one Redis and on a cluster."""

from __future__ import annotations

import redis

from animfleet.jobs import JobParams, JobRecord
from animfleet.region.admission import Admission, AdmissionOutcome, AdmissionScript
from animfleet.region.broker_outbox import outbox_key
from animfleet.region.erasure import Erasure
from animfleet.region.workers import WorkerRegistry

PARAMS = JobParams(prompt="sway", frames=4, fps=8, width=32, height=32, seed=1)
KEY = "{animfleet}:idem:key:k1"


def test_a_repeated_call_answers_what_it_did_and_records_the_uploads(
    redis_client: redis.Redis,
) -> None:
    WorkerRegistry(redis_client, "rp").beat("gpu0", {}, ttl_s=30, busy=False)  # room for one
    script = AdmissionScript(redis_client, "rp")
    job = JobRecord(id="rp.once", region="rp", home_region="rp", params=PARAMS)

    def admit(nonce: str) -> Admission:
        return script.admit(
            job, b"img", mode="backlog", message="m", queue="animate.rp", allowance=0.0,
            idempotency=[(KEY, 60)], idempotency_entry="entry", index=True,
            uploads=["up/b.png", "up/a.png"], outbox=True, nonce=nonce,
        )  # fmt: skip

    first = admit("n1")
    assert first.outcome is AdmissionOutcome.ADMITTED and first.outbox_entry
    # Resent with its nonce: the same answer, though the slot it took is full now (a blind
    # re-run would put the same job in the backlog too).
    assert admit("n1") == first
    assert script.recall(job.id, "n1") == first
    assert redis_client.zcard(outbox_key("rp")) == 1
    assert redis_client.zcard(script.backlog.all_key) == 0
    # Another call is another submit: the key it finds bound answers, and no answer is its own.
    assert admit("n2").outcome is AdmissionOutcome.REPEAT
    assert script.recall(job.id, "n2") is None
    assert Erasure(redis_client).uploads(job.id) == ["up/a.png", "up/b.png"]
