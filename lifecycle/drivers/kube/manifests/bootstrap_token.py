"""The bootstrap token a node joins the cluster with: made by racklife, stored as kubeadm's Secret.

``kubeadm join`` authenticates a new node with a bootstrap token
(``[a-z0-9]{6}.[a-z0-9]{16}``) that the control plane knows as a Secret
``bootstrap-token-<id>`` in ``kube-system`` (type
``bootstrap.kubernetes.io/token``), valid for authentication and signing, in
kubeadm's node group, until its expiration. racklife makes one per join, with
a short life, so a leaked token is worth little and a node's join never
depends on a long-lived shared secret. The token goes to the ``kube_node``
role as a ``no_log`` variable; ``repr`` and ``str`` never show its secret half.
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from lifecycle.drivers.kube.manifests.objects import Manifest

_ALPHABET = string.ascii_lowercase + string.digits
_TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})\Z")
NODE_GROUP = "system:bootstrappers:kubeadm:default-node-token"
"""The group kubeadm's RBAC lets post CSRs and read the cluster-info ConfigMap."""


@dataclass(frozen=True)
class BootstrapToken:
    token_id: str
    secret: str = field(repr=False)
    expires: datetime

    @classmethod
    def generate(cls, ttl: timedelta = timedelta(hours=1), now: datetime | None = None) -> BootstrapToken:
        if ttl <= timedelta(0):
            raise ValueError("a bootstrap token needs a positive lifetime")
        start = now or datetime.now(UTC)
        return cls("".join(secrets.choice(_ALPHABET) for _ in range(6)),
                   "".join(secrets.choice(_ALPHABET) for _ in range(16)),
                   (start + ttl).replace(microsecond=0))

    def __post_init__(self) -> None:
        if not _TOKEN.match(f"{self.token_id}.{self.secret}"):
            raise ValueError("a bootstrap token is [a-z0-9]{6}.[a-z0-9]{16}")
        if self.expires.tzinfo is None:
            raise ValueError("the expiration needs a time zone")

    @property
    def value(self) -> str:
        """``id.secret``: what ``kube_node_bootstrap_token`` receives. Never log it."""
        return f"{self.token_id}.{self.secret}"

    def __str__(self) -> str:
        return f"{self.token_id}.<redacted>"

    def secret_manifest(self, node: str) -> Manifest:
        """The ``kube-system`` Secret that makes the token valid on the control plane (holds the secret)."""
        return Manifest.new(
            "v1", "Secret", f"bootstrap-token-{self.token_id}", "kube-system",
            labels={"app.kubernetes.io/managed-by": "racklife"},
            type="bootstrap.kubernetes.io/token",
            stringData={
                "description": f"racklife: join of {node}",
                "token-id": self.token_id,
                "token-secret": self.secret,
                "expiration": self.expires.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true",
                "auth-extra-groups": NODE_GROUP,
            },
        )
