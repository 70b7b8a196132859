"""The kube_node role, applied in check mode and then for real to a throwaway root, twice.

Real ansible-core with the local connection; every path the role writes is
prefixed with a temporary directory (``kube_node_root``), as the Slurm roles'
test does. What is real and what is not:

- The Debian packages (containerd, runc, conntrack, …) are checked with the
  real apt module: ``scripts/bootstrap.sh`` installed them, so nothing changes.
- kubelet, kubeadm and nvidia-container-toolkit come from upstream apt
  repositories this machine cannot reach: the role's repository files are
  written for real, but the task installing those packages is not run
  (``kube_node_install_upstream_packages: false``; apt cannot resolve them,
  not even in check mode).
- containerd's configuration is loaded by the real containerd 1.6 of Debian 12
  (``containerd config dump``).
- ``kubeadm join`` is a script standing in for kubeadm (there is no control
  plane here): it records how it was called and what the join configuration
  said, and writes the kubelet's kubeconfig as kubeadm does, so the role's
  own logic (token only in a 0600 file, removed after, never logged; no
  second join) is what is tested.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.drivers.kube.manifests import validated
from lifecycle.drivers.kube.manifests.bootstrap_token import BootstrapToken
from tests.ansible_local import play_locally

pytestmark = [pytest.mark.root, pytest.mark.slow]

CA_HASH = "sha256:" + "ab" * 32

FAKE_KUBEADM = """#!/usr/bin/env python3
# Stands in for `kubeadm join --config FILE`: records the call, writes the kubelet's kubeconfig.
import json, os, stat, sys
import yaml
args = sys.argv[1:]
assert args[:2] == ["join", "--config"], args
config = args[2]
mode = stat.S_IMODE(os.stat(config).st_mode)
with open(config) as f:
    doc = yaml.safe_load(f)
root = os.path.dirname(os.path.dirname(os.path.dirname(config)))  # ROOT/etc/kubernetes/x.yaml
with open(os.environ["FAKE_KUBEADM_LOG"], "a") as log:
    log.write(json.dumps({"args": args, "mode": mode, "config": doc}) + "\\n")
os.makedirs(os.path.join(root, "etc", "kubernetes"), exist_ok=True)
with open(os.path.join(root, "etc", "kubernetes", "kubelet.conf"), "w") as f:
    f.write("apiVersion: v1\\nkind: Config\\n")
"""


def _play(repo: Path, tmp: Path, extra: dict[str, Any], check: bool = False) -> tuple[int, str]:
    book = tmp / "site.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                     "roles": [{"role": "kube_node"}]}]))
    varsfile = tmp / "vars.json"
    varsfile.write_text(json.dumps(extra))
    # --diff would print a templated file: the token must stay hidden all the same (no_log).
    args = [str(book), "-e", f"@{varsfile}", "-v", "--diff"] + (["--check"] if check else [])
    return play_locally(repo, tmp, args, env={"FAKE_KUBEADM_LOG": str(tmp / "kubeadm.log")})


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "root"
    root.mkdir()
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("kubernetes", "nvidia-container-toolkit"):
        (keys / f"{name}.asc").write_text(f"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n{name}\n-----END PGP PUBLIC KEY BLOCK-----\n")
    kubeadm = tmp_path / "kubeadm"
    kubeadm.write_text(FAKE_KUBEADM.replace("/usr/bin/env python3", sys.executable, 1))
    kubeadm.chmod(0o755)
    token = BootstrapToken.generate()
    return {
        "root": root, "token": token,
        "vars": {
            "kube_node_root": str(root),
            "kube_node_manage_services": False,
            "kube_node_install_upstream_packages": True,
            "kube_node_apt_repositories": [
                {"name": "kubernetes", "uri": "https://pkgs.k8s.io/core:/stable:/v1.32/deb/", "suites": ["/"],
                 "components": [], "key_src": str(keys / "kubernetes.asc")},
                {"name": "nvidia-container-toolkit", "uri": "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
                 "suites": ["/"], "components": [], "key_src": str(keys / "nvidia-container-toolkit.asc")}],
            "kube_node_upstream_packages": [],  # not installable here: see the module docstring
            "kube_node_hold_packages": [],
            "kube_node_kubeadm": str(kubeadm),
            "kube_node_name": "r02-n05",
            "kube_node_api_endpoint": "10.30.0.10:6443",
            "kube_node_bootstrap_token": token.value,
            "kube_node_ca_cert_hashes": [CA_HASH],
            "kube_node_labels": {"racklife.io/pool": "inference"},
            "kube_node_taints": ["racklife.io/pool=inference:NoSchedule", "racklife.io/maintenance=join-7:NoSchedule"],
        },
    }


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_check_mode_then_real_then_nothing_to_change(repo_dir: Path, tmp_path: Path, setup: dict[str, Any]) -> None:
    root: Path = setup["root"]
    token: BootstrapToken = setup["token"]

    would, out = _play(repo_dir, tmp_path, setup["vars"], check=True)
    assert would > 0
    assert _tree(root) == [], "check mode wrote into the root"
    assert not (tmp_path / "kubeadm.log").exists(), "check mode ran kubeadm"

    changed, out = _play(repo_dir, tmp_path, setup["vars"])
    assert changed > 0
    assert token.secret not in out, "the bootstrap token reached Ansible's output"

    # containerd: systemd cgroups, the NVIDIA runtime as default, accepted by the real containerd.
    config = root / "etc/containerd/config.toml"
    toml = tomllib.loads(config.read_text())
    cri = toml["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"] == {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    containerd = shutil.which("containerd")
    assert containerd, "containerd is not installed (scripts/bootstrap.sh installs it)"
    dump = subprocess.run([containerd, "--config", str(config), "config", "dump"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert dump.returncode == 0, dump.stderr
    assert 'default_runtime_name = "nvidia"' in dump.stdout and "nvidia-container-runtime" in dump.stdout

    # Repositories: deb822 with the signing key, never unsigned.
    sources = (root / "etc/apt/sources.list.d/racklife-kubernetes.sources").read_text()
    assert "URIs: https://pkgs.k8s.io/core:/stable:/v1.32/deb/" in sources
    assert "Signed-By: /etc/apt/keyrings/racklife-kubernetes.asc" in sources
    assert (root / "etc/apt/keyrings/racklife-nvidia-container-toolkit.asc").is_file()

    # Kernel and kubelet settings.
    assert (root / "etc/modules-load.d/racklife-kubernetes.conf").read_text() == "overlay\nbr_netfilter\n"
    assert "net.ipv4.ip_forward = 1" in (root / "etc/sysctl.d/60-racklife-kubernetes.conf").read_text()
    patch = yaml.safe_load((root / "etc/kubernetes/racklife-patches/kubeletconfiguration+strategic.yaml").read_text())
    assert patch["cgroupDriver"] == "systemd"
    assert patch["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"

    # The join: one kubeadm call with a 0600 configuration holding the token, removed afterwards.
    [call] = [json.loads(line) for line in (tmp_path / "kubeadm.log").read_text().splitlines()]
    assert call["mode"] == 0o600
    join = call["config"]
    assert join["apiVersion"] == "kubeadm.k8s.io/v1beta4" and join["kind"] == "JoinConfiguration"
    assert join["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": "10.30.0.10:6443", "token": token.value, "caCertHashes": [CA_HASH]}
    registration = join["nodeRegistration"]
    assert registration["name"] == "r02-n05"
    assert registration["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert registration["taints"] == [
        {"key": "racklife.io/pool", "value": "inference", "effect": "NoSchedule"},
        {"key": "racklife.io/maintenance", "value": "join-7", "effect": "NoSchedule"}]
    assert registration["kubeletExtraArgs"] == [{"name": "node-labels", "value": "racklife.io/pool=inference"}]
    assert join["patches"] == {"directory": "/etc/kubernetes/racklife-patches"}
    assert not (root / "etc/kubernetes/racklife-join.yaml").exists(), "the token was left on disk"
    assert (root / "etc/kubernetes/kubelet.conf").is_file()

    again, out = _play(repo_dir, tmp_path, setup["vars"])
    assert again == 0, out[-3000:]
    assert len((tmp_path / "kubeadm.log").read_text().splitlines()) == 1, "a joined node joined again"


def test_an_image_root_gets_no_join_and_no_token(repo_dir: Path, tmp_path: Path, setup: dict[str, Any]) -> None:
    extra = {k: v for k, v in setup["vars"].items() if k != "kube_node_bootstrap_token"} | {"kube_node_join": False}
    changed, _ = _play(repo_dir, tmp_path, extra)
    assert changed > 0
    assert not (tmp_path / "kubeadm.log").exists()
    assert not (setup["root"] / "etc/kubernetes/kubelet.conf").exists()
    again, out = _play(repo_dir, tmp_path, extra)
    assert again == 0, out[-3000:]


@pytest.mark.parametrize(("change", "message"), [
    ({"kube_node_bootstrap_token": "not-a-token"}, "must be a bootstrap token"),
    ({"kube_node_ca_cert_hashes": ["md5:00"]}, "kube_node_ca_cert_hashes (sha256:<64 hex>"),
    ({"kube_node_taints": ["racklife.io/pool=inference:Sometimes"]}, "is not key[=value]:NoSchedule"),
])
def test_bad_inputs_stop_before_anything_is_written(repo_dir: Path, tmp_path: Path, setup: dict[str, Any],
                                                    change: dict[str, Any], message: str) -> None:
    with pytest.raises(AssertionError) as info:
        _play(repo_dir, tmp_path, setup["vars"] | change)
    assert message in str(info.value)
    assert _tree(setup["root"]) == []
    assert "not-a-token" not in str(info.value)  # the token assertion is no_log


def test_a_repository_without_a_signing_key_is_refused(repo_dir: Path, tmp_path: Path, setup: dict[str, Any]) -> None:
    repos = [dict(r, key_src="") for r in setup["vars"]["kube_node_apt_repositories"]]
    with pytest.raises(AssertionError) as info:
        _play(repo_dir, tmp_path, setup["vars"] | {"kube_node_apt_repositories": repos})
    assert "racklife never trusts an unsigned repository" in str(info.value)
    assert _tree(setup["root"]) == []


def test_the_token_racklife_makes_is_kubeadms_secret() -> None:
    now = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    token = BootstrapToken.generate(now=now)
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", token.value)
    assert token.secret not in repr(token) and token.secret not in str(token)
    [secret] = validated([token.secret_manifest("r02-n05")])
    assert secret.name == f"bootstrap-token-{token.token_id}" and secret.namespace == "kube-system"
    assert secret.body["type"] == "bootstrap.kubernetes.io/token"
    data = secret.body["stringData"]
    assert data["token-secret"] == token.secret and data["expiration"] == "2026-12-01T09:00:00Z"
    assert data["usage-bootstrap-authentication"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
