terraform {
  required_version = ">= 1.5"
  required_providers {
    racklife = {
      # Installed by `racklife terraform install-provider` (a filesystem mirror; no registry is asked).
      source  = "racklife.io/racklife/racklife"
      version = "~> 0.1"
    }
  }
}
