"""The lab's Kubernetes API: a stand-in for kube-apiserver, because none can be installed here.

``server`` is the API (over TLS, on aiohttp; its rules in the modules beside it); ``run``
serves it from a thread (``KubeStandIn``) or a child process
(``KubeProcess``, also ``python -m lifecycle.lab.kube --kubeconfig PATH``)
and performs the lab's own changes: nodes joining and leaving, test pods and
budgets. What is emulated and what is not: ``docs/kubernetes.md``.
"""

from lifecycle.lab.kube.run import AdminError, KubeAdmin, KubeProcess, KubeStandIn, main, node_object
from lifecycle.lab.kube.server import GPU_RESOURCE, ApiServer

__all__ = ["GPU_RESOURCE", "AdminError", "ApiServer", "KubeAdmin", "KubeProcess", "KubeStandIn", "main", "node_object"]
