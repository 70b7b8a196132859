"""racklife: bare-metal GPU rack lifecycle across Slurm and Kubernetes."""

__version__ = "0.1.0"
