################################################################################
# Identity and placement
################################################################################

variable "name" {
  description = "Deployment name, prefixed to every resource name (e.g. `animfleet` or `animfleet-staging`)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name)) && !strcontains(var.name, "--")
    error_message = "`name` must be 3-20 lowercase letters, digits and single hyphens, starting with a letter."
  }
}

variable "fleet_region" {
  description = "The animfleet region name this fleet serves (the key in fleet.toml and the Celery queue `animate.<fleet_region>`), e.g. `us-east`."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,18}[a-z0-9]$", var.fleet_region)) && !strcontains(var.fleet_region, "--")
    error_message = "`fleet_region` must be 2-20 lowercase letters, digits and single hyphens, starting with a letter (the same rule as region names in fleet.toml, shortened to fit AWS name limits)."
  }

  validation {
    condition     = length("${var.name}-${var.fleet_region}") <= 33
    error_message = "`name` and `fleet_region` together must stay within 32 characters: the broker's replication group id `<name>-<fleet_region>-broker` is limited to 40."
  }
}

variable "aws_region" {
  description = "The AWS region the fleet's resources are created in, e.g. `us-east-1`."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$", var.aws_region))
    error_message = "`aws_region` must be an AWS region code such as `us-east-1` or `eu-west-1`."
  }
}

variable "vpc_id" {
  description = "The VPC that holds the fleet's instances and its broker."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "`vpc_id` must look like `vpc-0123456789abcdef0`."
  }
}

variable "private_subnet_ids" {
  description = "Private subnets (with a NAT route to the internet for package installation) in at least two availability zones, for the instances and the broker."
  type        = list(string)

  validation {
    condition     = length(var.private_subnet_ids) >= 2 && alltrue([for id in var.private_subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", id))])
    error_message = "`private_subnet_ids` needs at least two `subnet-...` ids (the broker's replica and the groups span availability zones)."
  }
}

variable "tags" {
  description = "Tags merged into the tags of every resource."
  type        = map(string)
  default     = {}
}

################################################################################
# Software on the instances
################################################################################

variable "package_spec" {
  description = "The pip requirement that installs animfleet on the instances, e.g. `animfleet==0.1.0` or `animfleet @ https://example.com/animfleet-0.1.0-py3-none-any.whl`."
  type        = string

  validation {
    condition     = can(regex("^animfleet( *@ *[^ ]+|(\\[[a-z,-]+\\])?(==|~=|>=)[0-9][0-9a-z.+-]*)$", var.package_spec))
    error_message = "`package_spec` must pin animfleet (`animfleet==X.Y.Z`, `animfleet~=X.Y`, `animfleet>=X.Y`) or point at an artifact (`animfleet @ <url>`)."
  }
}

variable "pip_index_url" {
  description = "A package index to install from instead of PyPI (a private mirror). Null uses PyPI."
  type        = string
  default     = null

  validation {
    condition     = var.pip_index_url == null || can(regex("^https://", var.pip_index_url))
    error_message = "`pip_index_url` must be an https:// URL."
  }
}

variable "python_version" {
  description = "The Python version uv installs for the project's virtual environment."
  type        = string
  default     = "3.11"

  validation {
    condition     = can(regex("^3\\.(1[1-9])$", var.python_version))
    error_message = "`python_version` must be 3.11 or newer, written as `3.<minor>`."
  }
}

variable "uv_version" {
  description = "The pinned uv release installed at boot to create the virtual environment."
  type        = string
  default     = "0.8.0"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+$", var.uv_version))
    error_message = "`uv_version` must be an exact release such as `0.8.0`."
  }
}

variable "environment" {
  description = "Extra non-secret environment variables for every animfleet process (never put credentials here: user data is readable by anyone allowed to describe the instance)."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for key in keys(var.environment) : can(regex("^[A-Z_][A-Z0-9_]*$", key)) && !can(regex("_BROKER_URL$|TOKEN|SECRET|PASSWORD", key))])
    error_message = "`environment` keys must be upper-case shell names and must not carry broker URLs, tokens, secrets or passwords."
  }
}

variable "config_parameter_prefix" {
  description = "SSM parameter path under which the deployment's `fleet.toml` and broker directory (`brokers.json`) live in this AWS region; instances wait for both at boot. Null uses `/<name>`."
  type        = string
  default     = null

  validation {
    condition     = var.config_parameter_prefix == null || can(regex("^(/[a-zA-Z0-9_.-]+)+$", var.config_parameter_prefix))
    error_message = "`config_parameter_prefix` must be an absolute SSM path such as `/animfleet`, without a trailing slash."
  }
}

variable "enable_session_manager" {
  description = "Attach AmazonSSMManagedInstanceCore to the instance roles so operators can open a shell through Session Manager (no SSH port is ever opened)."
  type        = bool
  default     = false
}

################################################################################
# GPU workers
################################################################################

variable "gpu_instance_type" {
  description = "The GPU instance type of the workers; one worker process runs per GPU (x86_64 NVIDIA types, e.g. `g5.xlarge`, `g6e.12xlarge`, `p4d.24xlarge`)."
  type        = string
  default     = "g5.xlarge"

  validation {
    condition     = can(regex("^(g4dn|g5|g6|g6e|gr6|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6-b200)\\.[0-9]*x?large$", var.gpu_instance_type))
    error_message = "`gpu_instance_type` must be an x86_64 NVIDIA GPU type (g4dn, g5, g6, g6e, gr6, p3, p4d, p5, ...); Graviton GPU types (g5g) cannot boot the x86_64 Deep Learning AMI."
  }
}

variable "gpu_ami_ssm_parameter" {
  description = "The SSM parameter that holds the current Deep Learning AMI id for the workers."
  type        = string
  default     = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"

  validation {
    condition     = can(regex("^/aws/service/deeplearning/ami/x86_64/", var.gpu_ami_ssm_parameter))
    error_message = "`gpu_ami_ssm_parameter` must be one of AWS's x86_64 Deep Learning AMI parameters under `/aws/service/deeplearning/ami/x86_64/`."
  }
}

variable "gpu_root_volume_size" {
  description = "Size of the workers' encrypted root volume in GiB (the Deep Learning AMI, the virtual environment and the model weights)."
  type        = number
  default     = 200

  validation {
    condition     = var.gpu_root_volume_size >= 100 && var.gpu_root_volume_size <= 16384
    error_message = "`gpu_root_volume_size` must be between 100 GiB (the AMI alone takes ~75) and 16384 GiB."
  }
}

variable "ebs_kms_key_arn" {
  description = "Customer managed KMS key for the instances' root volumes. Null uses the account's default EBS key (a customer managed key must grant the Auto Scaling service-linked role, or instances fail to launch)."
  type        = string
  default     = null

  validation {
    condition     = var.ebs_kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:", var.ebs_kms_key_arn))
    error_message = "`ebs_kms_key_arn` must be a KMS key ARN."
  }
}

variable "worker_min_size" {
  description = "Fewest GPU instances in the region. 0 lets an idle region scale to nothing; a queued job then wakes it (expect boot plus model load before the first job starts)."
  type        = number
  default     = 0

  validation {
    condition     = var.worker_min_size >= 0 && floor(var.worker_min_size) == var.worker_min_size
    error_message = "`worker_min_size` must be a whole number >= 0."
  }
}

variable "worker_max_size" {
  description = "Most GPU instances in the region (the budget cap; check the account's GPU vCPU quota in the region)."
  type        = number
  default     = 4

  validation {
    condition     = var.worker_max_size >= 1 && var.worker_max_size >= var.worker_min_size && floor(var.worker_max_size) == var.worker_max_size
    error_message = "`worker_max_size` must be a whole number >= 1 and >= `worker_min_size`."
  }
}

variable "job_duration_seconds" {
  description = "Typical GPU time of one job in seconds; with `acceptable_wait_seconds` it sets the scaling target."
  type        = number
  default     = 30

  validation {
    condition     = var.job_duration_seconds > 0 && var.job_duration_seconds <= 3600
    error_message = "`job_duration_seconds` must be in (0, 3600]."
  }
}

variable "acceptable_wait_seconds" {
  description = "How long a job may wait in the queue. The scaling target is backlog per worker = acceptable_wait_seconds / job_duration_seconds."
  type        = number
  default     = 60

  validation {
    condition     = var.acceptable_wait_seconds > 0 && var.acceptable_wait_seconds <= 86400
    error_message = "`acceptable_wait_seconds` must be in (0, 86400]."
  }
}

variable "job_timeout_seconds" {
  description = "The workers' hard time limit per job; an instance chosen for scale-in waits up to this long (plus a minute) for its running jobs to finish."
  type        = number
  default     = 900

  validation {
    condition     = var.job_timeout_seconds >= 60 && var.job_timeout_seconds <= 86400
    error_message = "`job_timeout_seconds` must be between 60 and 86400 (a terminating instance is held for at most 48 h)."
  }
}

variable "worker_warmup_seconds" {
  description = "Seconds from launch until a new GPU instance serves jobs (boot, install, model download, compile warm-up); scaling ignores new instances' metrics until then."
  type        = number
  default     = 900

  validation {
    condition     = var.worker_warmup_seconds >= 60 && var.worker_warmup_seconds <= 3600
    error_message = "`worker_warmup_seconds` must be between 60 and 3600."
  }
}

variable "model_artifacts" {
  description = "The workers' default model directory (ANIMFLEET_MODEL_DIR, used by jobs that name no version): the workers may read `s3://<bucket>/<prefix>*` and nothing else of that bucket, and sync it to local disk at boot. Versioned models (`model_versions`) live in the region's own bucket instead, under `<output_prefix>models/`."
  type = object({
    bucket      = string
    prefix      = string
    kms_key_arn = optional(string)
  })

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.model_artifacts.bucket)) && can(regex("^([^/].*/)$", var.model_artifacts.prefix))
    error_message = "`model_artifacts` needs a valid bucket name and a non-empty prefix without a leading slash that ends with `/` (the workers' read grant is scoped to it)."
  }
}

################################################################################
# Model versions and deployments
################################################################################

variable "model_versions" {
  description = "Model versions (`name@version`) this region serves, pushed beforehand with `animfleet model push <dir> <name@version>` into the region's bucket (`<output_prefix>models/`). The shared worker group preloads and hash-checks them at boot (ANIMFLEET_WORKER_MODELS) except those with a dedicated group in `version_worker_groups`; other versions are fetched on first use. Empty: the workers serve only their default model (`model_artifacts`)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for ref in var.model_versions : can(regex("^[a-z0-9][a-z0-9._-]{0,63}@[a-z0-9][a-z0-9._-]{0,63}$", ref))])
    error_message = "`model_versions` entries must be `name@version`: lowercase letters, digits, `.`, `_` and `-`, each part 1-64 characters starting with a letter or digit."
  }

  validation {
    condition     = length(distinct(var.model_versions)) == length(var.model_versions)
    error_message = "`model_versions` must not list a version twice."
  }
}

variable "deployments" {
  description = "The region's deployments: name => weighted versions, the `stable` version and optional automatic rollback thresholds (the Python defaults apply to those left out). The services instances apply them with `animfleet deploy apply` once per change of this value, not on every boot, so an automatic rollback stays in force until the next change here. Empty: nothing is applied."
  type = map(object({
    versions = map(number)
    stable   = string
    rollback = optional(object({
      window_s                = optional(number)
      min_samples             = optional(number)
      max_error_rate_increase = optional(number)
      max_p95_ratio           = optional(number)
    }))
  }))
  default = {}

  validation {
    condition     = alltrue([for name in keys(var.deployments) : can(regex("^[a-z0-9][a-z0-9._-]{0,63}$", name))])
    error_message = "`deployments` names must be 1-64 lowercase letters, digits, `.`, `_` and `-`, starting with a letter or digit (e.g. `default`)."
  }

  validation {
    condition     = alltrue(flatten([for deployment in values(var.deployments) : [for weight in values(deployment.versions) : weight >= 0]])) && alltrue([for deployment in values(var.deployments) : length(deployment.versions) > 0 && sum(concat([0], values(deployment.versions))) > 0])
    error_message = "`deployments` weights must be >= 0, and each deployment needs at least one version with a weight above 0."
  }

  validation {
    condition     = alltrue([for deployment in values(var.deployments) : contains(keys(deployment.versions), deployment.stable)])
    error_message = "Each deployment's `stable` version must be one of its `versions`."
  }

  validation {
    condition     = alltrue(flatten([for deployment in values(var.deployments) : [for ref in keys(deployment.versions) : contains(var.model_versions, ref)]]))
    error_message = "Every version a deployment names must be listed in `model_versions`."
  }
}

variable "version_worker_groups" {
  description = "Versions (from `model_versions`) that get a GPU worker group of their own, for models too large to share a GPU with others: version => instance counts. Their workers preload only that version, and the shared group does not preload it. These groups are not scaled on the backlog (the router publishes region-wide metrics only): they run `min_size` instances and an operator may raise the desired capacity up to `max_size`."
  type = map(object({
    min_size = number
    max_size = number
  }))
  default = {}

  validation {
    condition     = alltrue([for ref in keys(var.version_worker_groups) : contains(var.model_versions, ref)])
    error_message = "Every `version_worker_groups` key must be listed in `model_versions`."
  }

  validation {
    condition     = var.cell_count == 1 || length(var.version_worker_groups) == 0
    error_message = "`version_worker_groups` needs `cell_count = 1`: a dedicated group would serve one cell only."
  }

  validation {
    condition     = alltrue([for group in values(var.version_worker_groups) : group.min_size >= 0 && group.max_size >= 1 && group.max_size >= group.min_size && floor(group.min_size) == group.min_size && floor(group.max_size) == group.max_size])
    error_message = "`version_worker_groups` sizes must be whole numbers with 0 <= min_size <= max_size and max_size >= 1."
  }
}

################################################################################
# CPU services: web gateway, webhook sender, scheduler, sweeper, router
################################################################################

variable "cpu_instance_type" {
  description = "Instance type of the CPU group that runs `web`, `webhooks`, `scheduler` and `sweeper` (and of the router instance)."
  type        = string
  default     = "m7i.large"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[0-9]*(nano|micro|small|medium|x?large|metal)$", var.cpu_instance_type)) && !can(regex("^(g|p)[0-9]", var.cpu_instance_type))
    error_message = "`cpu_instance_type` must be an instance type such as `m7i.large`, and not a GPU type."
  }
}

variable "cpu_ami_ssm_parameter" {
  description = "The SSM parameter that holds the AMI id for the CPU instances."
  type        = string
  default     = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"

  validation {
    condition     = can(regex("^/aws/service/", var.cpu_ami_ssm_parameter))
    error_message = "`cpu_ami_ssm_parameter` must be an AWS public parameter under `/aws/service/`."
  }
}

variable "services_min_size" {
  description = "Fewest CPU instances running `web`, `webhooks`, `scheduler` and `sweeper`."
  type        = number
  default     = 1

  validation {
    condition     = var.services_min_size >= 1 && floor(var.services_min_size) == var.services_min_size
    error_message = "`services_min_size` must be a whole number >= 1: the gateway and webhook sender must always run, and so must the sweeper (several copies are safe)."
  }
}

variable "services_max_size" {
  description = "Most CPU instances running `web`, `webhooks`, `scheduler` and `sweeper` (they scale on CPU; every copy of the scheduler and sweeper is safe)."
  type        = number
  default     = 3

  validation {
    condition     = var.services_max_size >= var.services_min_size && floor(var.services_max_size) == var.services_max_size
    error_message = "`services_max_size` must be a whole number >= `services_min_size`."
  }
}

variable "create_router" {
  description = "Run the deployment's router in this region (a self-healing group of exactly one instance). Exactly one region of a deployment should set it."
  type        = bool
  default     = false
}

variable "gateway_port" {
  description = "TCP port the HTTP gateway (`animfleet web`) listens on."
  type        = number
  default     = 8000

  validation {
    condition     = var.gateway_port >= 1024 && var.gateway_port <= 65535
    error_message = "`gateway_port` must be an unprivileged port (1024-65535)."
  }
}

variable "gateway_ingress_cidr_blocks" {
  description = "Networks allowed to reach the HTTP gateway: the web backends or a load balancer's subnets. Never the whole internet; put a load balancer in front for that."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for cidr in var.gateway_ingress_cidr_blocks : can(cidrhost(cidr, 0)) && !contains(["0.0.0.0/0", "::/0"], cidr)])
    error_message = "`gateway_ingress_cidr_blocks` must be valid CIDR blocks and must not be 0.0.0.0/0 or ::/0."
  }
}

variable "remote_broker_client_cidr_blocks" {
  description = "Networks in other regions (peered or transit-routed) whose gateway and router instances reach this region's broker."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for cidr in var.remote_broker_client_cidr_blocks : can(cidrhost(cidr, 0)) && !contains(["0.0.0.0/0", "::/0"], cidr)])
    error_message = "`remote_broker_client_cidr_blocks` must be valid CIDR blocks and must not be 0.0.0.0/0 or ::/0."
  }
}

variable "remote_broker_cidr_blocks" {
  description = "Networks in other regions that hold their brokers; the gateway (for spillover) and the router may open Redis connections to them."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for cidr in var.remote_broker_cidr_blocks : can(cidrhost(cidr, 0)) && !contains(["0.0.0.0/0", "::/0"], cidr)])
    error_message = "`remote_broker_cidr_blocks` must be valid CIDR blocks and must not be 0.0.0.0/0 or ::/0."
  }
}

################################################################################
# Region store and broker: engines and cells
################################################################################

variable "store_engine" {
  description = "Where the region store (job records, backlog, heartbeats, idempotency) lives: `elasticache` (Redis OSS with an asynchronous replica: a failover can drop the last acknowledged writes) or `memorydb` (Amazon MemoryDB, cluster mode, TLS and an ACL user: an acknowledged write is in a multi-zone transaction log and survives the loss of the primary)."
  type        = string
  default     = "elasticache"

  validation {
    condition     = contains(["elasticache", "memorydb"], var.store_engine)
    error_message = "`store_engine` must be `elasticache` or `memorydb`."
  }
}

variable "broker_engine" {
  description = "The Celery broker: `redis` (on ElastiCache: the region store's own Redis when `store_engine` is `elasticache`, else a Redis of its own, since Celery's Redis transport cannot use a cluster) or `rabbitmq` (Amazon MQ for RabbitMQ, a three-node multi-zone cluster; the workers declare quorum queues)."
  type        = string
  default     = "redis"

  validation {
    condition     = contains(["redis", "rabbitmq"], var.broker_engine)
    error_message = "`broker_engine` must be `redis` or `rabbitmq`."
  }
}

variable "cell_count" {
  description = "Cells the region is split into: each cell `<fleet_region>-c<k>` (k = 1..cell_count) gets a store of its own, its own broker queues on the region's broker, and a GPU worker group of its own sized by `worker_min_size`/`worker_max_size`. 1 keeps the region whole."
  type        = number
  default     = 1

  validation {
    condition     = var.cell_count >= 1 && var.cell_count <= 16 && floor(var.cell_count) == var.cell_count
    error_message = "`cell_count` must be a whole number from 1 to 16."
  }
}

variable "memorydb_node_type" {
  description = "MemoryDB node type of the region store when `store_engine` is `memorydb`."
  type        = string
  default     = "db.t4g.medium"

  validation {
    condition     = can(regex("^db\\.[a-z0-9]+\\.[a-z0-9]+$", var.memorydb_node_type))
    error_message = "`memorydb_node_type` must be a MemoryDB node type such as `db.t4g.medium` or `db.r7g.large`."
  }
}

variable "memorydb_replicas_per_shard" {
  description = "Replicas of each MemoryDB shard, placed in other availability zones; one takes over when the primary fails, without losing acknowledged writes."
  type        = number
  default     = 1

  validation {
    condition     = var.memorydb_replicas_per_shard >= 1 && var.memorydb_replicas_per_shard <= 5 && floor(var.memorydb_replicas_per_shard) == var.memorydb_replicas_per_shard
    error_message = "`memorydb_replicas_per_shard` must be a whole number from 1 to 5: without a replica a node failure stops the region until the node is replaced."
  }
}

variable "mq_instance_type" {
  description = "Amazon MQ instance type of the RabbitMQ cluster's three nodes when `broker_engine` is `rabbitmq`."
  type        = string
  default     = "mq.m5.large"

  validation {
    condition     = can(regex("^mq\\.m[0-9]+g?\\.[0-9]*x?large$", var.mq_instance_type))
    error_message = "`mq_instance_type` must be an Amazon MQ cluster instance type such as `mq.m5.large` or `mq.m7g.large` (`mq.t3.micro` runs single-instance brokers only)."
  }
}

variable "mq_engine_version" {
  description = "RabbitMQ engine version of the Amazon MQ broker (3.13 or newer: quorum queues with a delivery limit)."
  type        = string
  default     = "3.13"

  validation {
    condition     = can(regex("^(3\\.1[3-9]|[4-9]\\.[0-9]+)$", var.mq_engine_version))
    error_message = "`mq_engine_version` must be a RabbitMQ minor version of 3.13 or newer, such as `3.13` or `4.2`."
  }
}

################################################################################
# ElastiCache (the store when `store_engine` is `elasticache`, the Redis broker)
################################################################################

variable "broker_node_type" {
  description = "ElastiCache node type of the region's Redis broker."
  type        = string
  default     = "cache.t4g.medium"

  validation {
    condition     = can(regex("^cache\\.[a-z0-9]+\\.[a-z0-9]+$", var.broker_node_type))
    error_message = "`broker_node_type` must be an ElastiCache node type such as `cache.t4g.medium`."
  }
}

variable "broker_num_cache_clusters" {
  description = "Nodes in the broker's replication group (a primary and its replicas), spread over availability zones for automatic failover."
  type        = number
  default     = 2

  validation {
    condition     = var.broker_num_cache_clusters >= 2 && var.broker_num_cache_clusters <= 6 && floor(var.broker_num_cache_clusters) == var.broker_num_cache_clusters
    error_message = "`broker_num_cache_clusters` must be a whole number from 2 to 6: a single node loses every queued job when it fails."
  }
}

variable "broker_engine_version" {
  description = "Redis engine version of the broker (7.x: the parameter group family is `redis7`)."
  type        = string
  default     = "7.1"

  validation {
    condition     = can(regex("^7\\.[0-9]+$", var.broker_engine_version))
    error_message = "`broker_engine_version` must be a Redis 7 version such as `7.1`."
  }
}

variable "broker_snapshot_retention_days" {
  description = "Days of daily snapshots of the region's ElastiCache groups and MemoryDB clusters to keep (queued jobs and job records survive the loss of every node, up to the last snapshot)."
  type        = number
  default     = 3

  validation {
    condition     = var.broker_snapshot_retention_days >= 1 && var.broker_snapshot_retention_days <= 35
    error_message = "`broker_snapshot_retention_days` must be between 1 and 35."
  }
}

variable "secret_recovery_window_days" {
  description = "Days a deleted connection secret can be restored; 0 deletes it at once, so a torn-down region can be recreated under the same name straight away."
  type        = number
  default     = 7

  validation {
    condition     = var.secret_recovery_window_days == 0 || (var.secret_recovery_window_days >= 7 && var.secret_recovery_window_days <= 30)
    error_message = "`secret_recovery_window_days` must be 0 or between 7 and 30."
  }
}

variable "kms_key_deletion_window_days" {
  description = "Waiting period before the region's KMS key is deleted after a teardown."
  type        = number
  default     = 30

  validation {
    condition     = var.kms_key_deletion_window_days >= 7 && var.kms_key_deletion_window_days <= 30
    error_message = "`kms_key_deletion_window_days` must be between 7 and 30."
  }
}

################################################################################
# Output storage
################################################################################

variable "create_bucket" {
  description = "Create the region's output bucket. False uses the existing bucket named by `bucket_name` (e.g. one shared by several regions)."
  type        = bool
  default     = true
}

variable "bucket_name" {
  description = "Name of the existing output bucket when `create_bucket` is false; ignored otherwise (a unique `<name>-<fleet_region>-` name is generated)."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "`bucket_name` must be a valid S3 bucket name."
  }

  validation {
    condition     = var.create_bucket || var.bucket_name != null
    error_message = "`bucket_name` is required when `create_bucket` is false."
  }
}

variable "bucket_region" {
  description = "AWS region of the existing output bucket when `create_bucket` is false. Null means `aws_region`."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_region == null || can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$", var.bucket_region))
    error_message = "`bucket_region` must be an AWS region code such as `us-east-1`."
  }
}

variable "bucket_kms_key_arn" {
  description = "KMS key that encrypts the existing output bucket when `create_bucket` is false (null if it uses SSE-S3)."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:", var.bucket_kms_key_arn))
    error_message = "`bucket_kms_key_arn` must be a KMS key ARN."
  }
}

variable "output_prefix" {
  description = "The region's storage prefix in the bucket (fleet.toml's `storage.prefix`): job outputs (`<prefix>outputs/`) and archived records (`<prefix>records/`), which expire, and the model registry (`<prefix>models/`), which does not and which no instance may write. The workers' write grant is scoped to it."
  type        = string
  default     = "outputs/"

  validation {
    condition     = can(regex("^[a-zA-Z0-9!_.*'()-][a-zA-Z0-9!_.*'()/-]*/$", var.output_prefix))
    error_message = "`output_prefix` must be non-empty, must not start with `/` and must end with `/` (e.g. `outputs/`)."
  }
}

variable "output_expiry_days" {
  description = "Days after which outputs are deleted from the bucket (presigned URLs must expire before this)."
  type        = number
  default     = 7

  validation {
    condition     = var.output_expiry_days >= 1 && var.output_expiry_days <= 3650 && floor(var.output_expiry_days) == var.output_expiry_days
    error_message = "`output_expiry_days` must be a whole number of days from 1 to 3650."
  }
}

################################################################################
# Metrics and alarms
################################################################################

variable "metrics_namespace" {
  description = "CloudWatch namespace the router publishes the fleet metrics to (`dispatcher.routing.cloudwatch`'s default is `animfleet`)."
  type        = string
  default     = "animfleet"

  validation {
    condition     = can(regex("^[A-Za-z0-9._/#:-]{1,255}$", var.metrics_namespace)) && !startswith(var.metrics_namespace, "AWS/")
    error_message = "`metrics_namespace` must be a custom CloudWatch namespace (not `AWS/...`)."
  }
}

variable "alarm_actions" {
  description = "SNS topic ARNs notified when an alarm fires or recovers."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for arn in var.alarm_actions : can(regex("^arn:aws[a-z-]*:sns:", arn))])
    error_message = "`alarm_actions` must be SNS topic ARNs."
  }
}

variable "queue_age_alarm_seconds" {
  description = "Alarm when the oldest queued job has waited longer than this for three minutes."
  type        = number
  default     = 300

  validation {
    condition     = var.queue_age_alarm_seconds >= 10
    error_message = "`queue_age_alarm_seconds` must be at least 10."
  }
}

variable "failure_rate_alarm_percent" {
  description = "Alarm when more than this share of finished jobs failed over ten minutes."
  type        = number
  default     = 10

  validation {
    condition     = var.failure_rate_alarm_percent > 0 && var.failure_rate_alarm_percent <= 100
    error_message = "`failure_rate_alarm_percent` must be in (0, 100]."
  }
}

variable "failure_rate_min_jobs" {
  description = "Finished jobs needed in the ten-minute window before the failure rate alarm judges it (a single failure out of two jobs is noise)."
  type        = number
  default     = 10

  validation {
    condition     = var.failure_rate_min_jobs >= 1
    error_message = "`failure_rate_min_jobs` must be at least 1."
  }
}

variable "no_live_workers_alarm_minutes" {
  description = "Alarm when the group wants GPU instances but no worker has reported live for this many minutes (or the router stopped publishing)."
  type        = number
  default     = 20

  validation {
    condition     = var.no_live_workers_alarm_minutes >= 5 && var.no_live_workers_alarm_minutes <= 1440
    error_message = "`no_live_workers_alarm_minutes` must be between 5 and 1440; keep it above the worker warm-up time."
  }
}

variable "scale_in_idle_minutes" {
  description = "Remove one GPU instance after workers sat idle with an empty backlog for this many minutes in a row (scale-in never goes below the workers running jobs)."
  type        = number
  default     = 10

  validation {
    condition     = var.scale_in_idle_minutes >= 2 && var.scale_in_idle_minutes <= 1440 && floor(var.scale_in_idle_minutes) == var.scale_in_idle_minutes
    error_message = "`scale_in_idle_minutes` must be a whole number between 2 and 1440."
  }
}
