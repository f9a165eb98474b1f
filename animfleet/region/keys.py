"""The names of every Redis key a region holds, and how long records live.

Each name has one owner module in this package, which alone reads and writes it:
:mod:`.jobstore` (records, inputs, queue order, deadlines, run times, idempotency, the holding and
waiting sets; records are created only by :mod:`.admission`, which also lists a new job under
its tenant for :mod:`.listing` and :mod:`.tenants`), :mod:`.runs` (the lease of each job's live
run), :mod:`.workers` (heartbeats), :mod:`.outbox` (webhook deliveries), :mod:`.joblogs` (each
job's log lines), :mod:`.erasure` (deleted jobs), :mod:`.usage` (its roll-up cursor and notes),
:mod:`.retention` (finished jobs by tenant and end), :mod:`.broker_outbox` (messages on their
way to a broker apart from the store, the ones it refused, dead-letter counts) and
:mod:`.status` (read-only counts for the router), :mod:`.affinity` (what workers hold warm,
their direct queues), :mod:`.sweep_lease` (the sweeper's lease), :mod:`.sweeper` (the
time a region lost its last worker) and :mod:`.backlog` with :mod:`.handoff` (the backlog; the
admission script adds to it, and a move onto the GPU queue adds to the queued set).
The routing table is written by the router and read by dispatchers (``dispatcher/routing``).

Every key starts with one hash tag (``{animfleet}``), so on a Redis Cluster (MemoryDB runs only in
cluster mode) all of a store's keys hash to one slot: its scripts, transactions and multi-key
commands are then legal there, and a script may touch a key it builds from a declared key's
prefix (a record by job id, a tenant's backlog) because that key shares the tag and so the
slot. One constant tag is enough: a store holds one region (or one cell, each its own store),
so a store never needs to spread its keys over slots; a region grows past one shard by cells.
"""

KEY_PREFIX = "{animfleet}:"
JOB_KEY = KEY_PREFIX + "job:"  # + job id -> JSON job record
INPUT_KEY = KEY_PREFIX + "input:"  # + job id -> input image bytes until the job is terminal

WORKER_KEY = KEY_PREFIX + "worker:"  # + region + ":" + worker -> JSON heartbeat, expiring
WORKER_SET = KEY_PREFIX + "workers:"  # + region -> zset worker -> time its heartbeat lapses
BUSY_SET = KEY_PREFIX + "busy:"  # + region -> zset of workers running a job, same scores
DRAINING_KEY = KEY_PREFIX + "draining:"  # + region + ":" + worker -> set while it shuts down

QUEUED_SET = KEY_PREFIX + "queued:"  # + region -> zset of queued job ids scored by enqueue time
FINISHED_SET = KEY_PREFIX + "finished:"  # + region -> zset of terminal job ids by end time
RUNNING_SET = KEY_PREFIX + "running:"  # + region -> zset of running job ids by start time
RUN_LEASE_KEY = KEY_PREFIX + "run-lease:"  # + job id -> its live run's token, expiring
SWEEP_LEASE_KEY = KEY_PREFIX + "sweep-lease:"  # + region -> held by one sweeper per pass
NO_WORKERS_KEY = KEY_PREFIX + "no-workers-since:"  # + region -> when a sweeper first saw none
START_BY_SET = KEY_PREFIX + "start-by:"  # + region -> zset of queued job ids by start deadline
RUN_TIMES = KEY_PREFIX + "run-times:"  # + region -> list of recent run seconds, newest first
IDEMPOTENCY_KEY = KEY_PREFIX + "idem:"  # + scope + ":" + key -> JSON {job_id, fingerprint}
# + job id -> "<nonce> <JSON answer>" of the admission call that wrote it (:mod:`.admission`)
ADMIT_REPLY = KEY_PREFIX + "admitted:"

WEBHOOK_DUE_SET = KEY_PREFIX + "webhook-due:"  # + region -> zset delivery id -> due time
WEBHOOK_DELIVERY_KEY = KEY_PREFIX + "webhook:"  # + delivery id -> JSON delivery (event + state)
WEBHOOK_JOB_KEY = KEY_PREFIX + "webhooks-of:"  # + job id -> list of its delivery ids
WEBHOOKS_ALIVE_KEY = KEY_PREFIX + "webhooks-alive:"  # + region -> set by its scheduler, expiring

ROUTING_KEY = KEY_PREFIX + "routing"  # JSON: the routing table and the loads behind it
HOLDING_SET = KEY_PREFIX + "holding:"  # + home region -> zset of its jobs this region holds
WAITING_SET = KEY_PREFIX + "waiting:"  # + region -> zset of its jobs waiting at dispatchers

# The durable backlog ahead of a region's GPU queue, owned by :mod:`.backlog` (and moved out of
# by :mod:`.handoff`): per tenant a zset of job ids by priority then submission time; the
# tenants' round-robin ring and its member set; their deficits and weights; every backlog job
# (by submission time) with its Celery message; how often the hand-off passed a job over;
# jobs half-way to another region; a lease.
BACKLOG_TENANT = KEY_PREFIX + "backlog:"  # + region + ":" + tenant -> zset job id -> order
BACKLOG_ALL = KEY_PREFIX + "backlog-all:"  # + region -> zset job id -> created at
BACKLOG_MESSAGE = KEY_PREFIX + "backlog-msg:"  # + region -> hash job id -> Celery message
BACKLOG_RING = KEY_PREFIX + "backlog-ring:"  # + region -> list of tenants with jobs, in turn
BACKLOG_ACTIVE = KEY_PREFIX + "backlog-active:"  # + region -> set: the ring's members
BACKLOG_DEFICIT = KEY_PREFIX + "backlog-deficit:"  # + region -> hash tenant -> DRR deficit
BACKLOG_WEIGHTS = KEY_PREFIX + "backlog-weights:"  # + region -> hash tenant -> share weight
BACKLOG_BYPASS = KEY_PREFIX + "backlog-bypass:"  # + region -> hash job id -> times passed over
BACKLOG_MOVING = KEY_PREFIX + "backlog-moving:"  # + region -> hash job id -> JSON spill claim
SCHEDULER_LEASE = KEY_PREFIX + "scheduler-lease:"  # + region -> the scheduler moving its jobs

# Tenants (:mod:`.tenants`): API key records (hash, tenant, revocation), each tenant's keys,
# limits and webhook signing secrets, the set of tenants; its request-rate bucket
# (:mod:`.ratelimit`); its jobs by creation time for listing (:mod:`.listing`).
API_KEY = KEY_PREFIX + "apikey:"  # + key id -> hash tenant, hash, created_at, name, revoked_at
TENANT_KEYS = KEY_PREFIX + "tenant-keys:"  # + tenant -> set of its key ids
TENANT_KEY = KEY_PREFIX + "tenant:"  # + tenant -> hash limits (JSON), webhook_secrets (JSON)
TENANT_SET = KEY_PREFIX + "tenants"  # set of every tenant with a key, limits or secrets
RATE_BUCKET = KEY_PREFIX + "rate:"  # + tenant -> hash tokens, at (a token bucket), expiring
TENANT_IN_FLIGHT = KEY_PREFIX + "tenant-in-flight:"  # + tenant -> zset of its unfinished jobs
TENANT_JOBS = KEY_PREFIX + "tenant-jobs:"  # + tenant -> zset job id -> created at

# Each job's own log (:mod:`.joblogs`): its last lines from every process, and their counter.
JOB_LOG_KEY = KEY_PREFIX + "job-log:"  # + job id -> list of "<seq> <JSON line>", capped
JOB_LOG_SEQ = KEY_PREFIX + "job-log-seq:"  # + job id -> the last line's sequence number

# Deleted jobs (:mod:`.erasure`): when each was deleted (what an idempotent retry of its submit
# finds); the uploads each job's request named (deleted with it; the admission script records
# them at the job's home, in the call that creates the job).
DELETED_KEY = KEY_PREFIX + "deleted:"  # + job id -> JSON {tenant, at}, expiring
JOB_UPLOADS = KEY_PREFIX + "job-uploads:"  # + job id -> set of upload keys its request named

# Usage (:mod:`.usage`): the end time up to which a region's finished jobs were rolled up into
# the day objects in storage, and what deletions noted since.
USAGE_CURSOR = KEY_PREFIX + "usage-cursor:"  # + region -> unix seconds
RETAINED = KEY_PREFIX + "retained:"  # + region:tenant -> zset job id -> end (:mod:`.retention`)
USAGE_PENDING = KEY_PREFIX + "usage-pending:"  # + region -> list of JSON [tenant, day usage]

# Model versions and deployments: the versions the region's registry holds (:mod:`.catalog`,
# written by ``animfleet model push``), its deployments and their event log
# (:mod:`.deployments`), and each version's recent outcomes (:mod:`.canary`).
MODEL_CATALOG = KEY_PREFIX + "models:"  # + region -> hash name@version -> JSON manifest summary
DEPLOYMENTS = KEY_PREFIX + "deployments:"  # + region -> hash name -> JSON deployment
DEPLOY_EVENTS = KEY_PREFIX + "deploy-events:"  # + region -> list of JSON events, newest first
VERSION_RUNS = KEY_PREFIX + "version-runs:"  # + region + ":" + version -> zset outcome -> time

# Motion add-ons the region's workers serve (:mod:`.addons`), advertised by each worker at boot.
ADDONS_SERVED = KEY_PREFIX + "addons:"  # + region -> zset add-on name -> time last advertised
# What workers hold warm and their own queues (:mod:`.affinity`): per thing (``addon:<name>``,
# ``template:<image sha256>``) the workers holding it; the workers with a direct queue.
HELD_BY = KEY_PREFIX + "held-by:"  # + region + ":" + thing -> zset worker -> claim lapses at
DIRECT_QUEUES = KEY_PREFIX + "direct-queues:"  # + region -> set of workers with a direct queue
PREFETCH_CHANNEL = KEY_PREFIX + "prefetch:"  # + region -> pub/sub: load these add-ons now
DIRECT_CLAIMS = KEY_PREFIX + "direct-claims:"  # + region -> hash worker -> handed a job until

# Celery messages on their way to a broker apart from the store (:mod:`.broker_outbox`):
# "<queue> <message>" -> the time from which the relay publishes it.
BROKER_OUTBOX = KEY_PREFIX + "broker-outbox:"  # + region -> zset entry -> publish from
# Entries the broker refused for good, kept for an operator -> the time they were set aside;
# and how often each job's message came back dead-lettered, expiring.
BROKER_QUARANTINE = KEY_PREFIX + "broker-quarantine:"  # + region -> zset entry -> refused at
DEAD_LETTERED = KEY_PREFIX + "dead-lettered:"  # + job id -> times its message was dead-lettered

# A finished job's record is kept this long; its input bytes only until it is terminal.
RECORD_TTL_S = 7 * 24 * 3600
INPUT_TTL_S = 2 * 24 * 3600
