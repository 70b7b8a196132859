"""One interface per outside concern (BMC, boot, Slurm, Kubernetes, remote), each with real and fake implementations."""
