terraform {
  # 1.9: validation conditions may refer to other variables.
  required_version = ">= 1.9"

  required_providers {
    # 6.0: every regional resource takes a `region` argument, so one provider configuration serves
    # every region and the example can instantiate this module with `for_each`.
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.5"
    }
  }
}
