"""Queue and task names: what dispatchers, workers and the webhook sender must agree on.

Redis key names live with their owners in :mod:`animfleet.region.keys`.
"""

ANIMATE_TASK = "animfleet.animate"
ANIMATE_QUEUE_PREFIX = "animate."  # + region name
WEBHOOK_TASK = "animfleet.webhook.deliver"
WEBHOOK_QUEUE_PREFIX = "webhooks."  # + region name
