"""Fake GPU, NCCL and InfiniBand tools for the lab's simulated nodes.

A simulated node has no GPU, yet burn-in, acceptance and health checks must
run on it unchanged. These tools stand in for `nvidia-smi`, `dcgmi`, the
nccl-tests binaries, `ibstat`, `ibv_devinfo`, `dmesg` and `nvme` (list, sanitize-log), answering in the
real tools' output formats (modelled on captured output in
``../shared/fixtures``) for the node's SKU and its current fault profile.

One entry point serves every tool: a node's ``bin/`` directory holds a small
launcher and one symlink per tool name, and the tool is chosen by the name it
was called as. The node directory (the launcher's parent) holds the node's
facts (``node.json``) and its fault (``fault.json``), read on every call so
faults can be injected into a running lab.
"""

TOOLS = (
    "nvidia-smi",
    "dcgmi",
    "all_reduce_perf",
    "all_gather_perf",
    "reduce_scatter_perf",
    "alltoall_perf",
    "ibstat",
    "ibv_devinfo",
    "dmesg",
    "dmidecode",
    "mpirun",
    "nvme",
)
