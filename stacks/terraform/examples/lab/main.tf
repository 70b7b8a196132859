# The 4-node lab (`racklife lab up --nodes 4`) as a Terraform module: two pools, four nodes.
# The provider reads the lab's settings from the environment `racklife lab env` exports
# (RACKLIFE_INVENTORY, RACKLIFE_HOME, SLURM_CONF, KUBECONFIG, the boot server, the SSH config).
provider "racklife" {
  images           = var.images
  acceptance_level = "quick"
  max_unavailable  = "1"
}

resource "racklife_pool" "training" {
  name         = "training"
  scheduler    = "slurm"
  partition    = "training"
  min_nodes    = var.training_min_nodes
  leave_policy = "wait"
}

resource "racklife_pool" "inference" {
  name      = "inference"
  scheduler = "kubernetes"
  labels    = { "racklife.io/pool" = "inference" }
  taints    = []
}

locals {
  pools = {
    training  = racklife_pool.training.name
    inference = racklife_pool.inference.name
  }
}

resource "racklife_node" "node" {
  for_each = var.node_pools
  name     = each.key
  pool     = local.pools[each.value]
  image    = lookup(var.node_images, each.key, var.image)
  # A node's firmware baseline (component -> version), each component's image from var.firmware_files.
  firmware       = try(var.node_firmware[each.key], null)
  firmware_files = contains(keys(var.node_firmware), each.key) ? var.firmware_files : null
}

data "racklife_node" "observed" {
  for_each   = racklife_node.node
  name       = each.value.name
  depends_on = [racklife_node.node]
}
