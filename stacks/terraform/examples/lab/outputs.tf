output "nodes" {
  description = "Each node's state, pool, power and what racklife would still do to it."
  value = {
    for name, n in data.racklife_node.observed : name => {
      state   = n.state
      pool    = n.pool
      power   = n.power
      image   = n.booted_image
      version = n.booted_version
      steps   = n.steps
      drift   = n.drift
      slurm   = n.slurm_state
      kube    = n.kube_ready
    }
  }
}
