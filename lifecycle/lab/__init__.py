"""The lab: an emulated GPU rack on one machine (BMC emulators, real Slurm, simulated nodes in netns)."""
