variable "name" {
  description = "Deployment name, prefixed to every resource name."
  type        = string
  default     = "animfleet"
}

variable "home_aws_region" {
  description = "Region of the one AWS provider configuration; every regional resource names its own region (AWS provider >= 6), so this only hosts global API calls."
  type        = string
  default     = "us-east-1"
}

variable "regions" {
  description = "The fleet, one entry per animfleet region: its AWS region, capacity, round-trip latency in ms to the other regions (one direction is enough), and its store (`elasticache` or `memorydb`), broker (`redis` or `rabbitmq`) and number of cells (see the module's variables)."
  type = map(object({
    aws_region        = string
    gpu_instance_type = optional(string, "g5.xlarge")
    worker_min_size   = optional(number, 0)
    worker_max_size   = optional(number, 4)
    services_min_size = optional(number, 1)
    services_max_size = optional(number, 3)
    router            = optional(bool, false)
    latency_ms        = optional(map(number), {})
    store_engine      = optional(string, "elasticache")
    broker_engine     = optional(string, "redis")
    cell_count        = optional(number, 1)
  }))
  default = {
    us-east = {
      aws_region      = "us-east-1"
      router          = true
      worker_min_size = 1
      worker_max_size = 8
      latency_ms      = { eu-west = 80, ap-south = 190 }
    }
    eu-west = {
      aws_region = "eu-west-1"
      latency_ms = { ap-south = 120 }
    }
    ap-south = {
      aws_region = "ap-south-1"
    }
  }

  validation {
    condition     = length([for region in var.regions : region if region.router]) == 1
    error_message = "Exactly one region must run the router (`router = true`)."
  }

  validation {
    condition = alltrue(flatten([
      for name, region in var.regions : [for peer in keys(region.latency_ms) : contains(keys(var.regions), peer) && peer != name]
    ]))
    error_message = "`latency_ms` may only name other regions of the map."
  }

  validation {
    condition     = length(distinct([for region in var.regions : region.aws_region])) == length(var.regions)
    error_message = "Each animfleet region needs its own AWS region (resource names are per AWS region)."
  }
}

variable "networks" {
  description = "Per animfleet region (same keys as `regions`): the VPC, its CIDR (peered with the other regions' VPCs so gateways and the router reach every broker), private subnets with NAT, and the networks allowed to call the gateway."
  type = map(object({
    vpc_id                      = string
    vpc_cidr_block              = string
    private_subnet_ids          = list(string)
    gateway_ingress_cidr_blocks = optional(list(string), [])
  }))

  validation {
    condition     = alltrue([for network in var.networks : can(cidrhost(network.vpc_cidr_block, 0))])
    error_message = "Every `vpc_cidr_block` must be a CIDR block."
  }

  validation {
    condition     = sort(keys(var.networks)) == sort(keys(var.regions))
    error_message = "`networks` must have exactly one entry per region of `regions`."
  }
}

variable "package_spec" {
  description = "The pip requirement that installs animfleet on the instances, e.g. `animfleet==0.1.0`."
  type        = string
}

variable "model_artifacts" {
  description = "Per animfleet region, where its workers read the model weights (keep a copy in each region's own bucket; cross-region reads are slow and billed)."
  type = map(object({
    bucket      = string
    prefix      = string
    kms_key_arn = optional(string)
  }))

  validation {
    condition     = sort(keys(var.model_artifacts)) == sort(keys(var.regions))
    error_message = "`model_artifacts` must have exactly one entry per region of `regions`."
  }
}

variable "model_versions" {
  description = "Model versions (`name@version`) every region serves, each pushed first into every region's registry with `animfleet model push <dir> <name@version> --region <region>` (see the module's `model_versions`)."
  type        = list(string)
  default     = []
}

variable "deployments" {
  description = "Deployments applied in every region: name => weighted versions, the stable version and optional rollback thresholds (see the module's `deployments`; the module validates them)."
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
}

variable "version_worker_groups" {
  description = "Per animfleet region, versions that get a GPU worker group of their own (too large to share a GPU): version => { min_size, max_size } (see the module's `version_worker_groups`)."
  type = map(map(object({
    min_size = number
    max_size = number
  })))
  default = {}

  validation {
    condition     = length(setsubtract(keys(var.version_worker_groups), keys(var.regions))) == 0
    error_message = "`version_worker_groups` keys must be regions of `regions`."
  }
}

variable "alarm_actions" {
  description = "Per animfleet region, SNS topic ARNs (in that AWS region) the fleet's alarms notify."
  type        = map(list(string))
  default     = {}
}

variable "tags" {
  description = "Tags merged into every resource."
  type        = map(string)
  default     = {}
}
