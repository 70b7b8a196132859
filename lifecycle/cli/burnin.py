"""``racklife burnin``: run burn-in on a node, parse tool output offline, judge a result.

Thin: every verb calls the function ``python -m burnin`` uses (``burnin.cli``), so the
node-side command and this one print the same documents and use the same exit codes.
"""

from __future__ import annotations

from pathlib import Path

import typer

from burnin import cli as node_cli
from lifecycle.cli._common import BAD_INPUT, JsonOpt, emit_json, emit_table, error_exit, fail
from lifecycle.model.vocab import Level

app = typer.Typer(help="Node burn-in: GPUs, links and firmware checked against a SKU profile.",
                  no_args_is_help=True)


@app.command("run")
def run(
    profile: str = typer.Option(..., "--profile", help="SKU profile, e.g. h100-sxm-8"),
    level: Level = typer.Option("standard", "--level", help="how much of the profile runs"),
    out: Path = typer.Option(..., "--out", help="directory for result.json and raw outputs"),
    skip: list[str] = typer.Option([], "--skip", help="check to skip (recorded as error)"),
    expect_driver: str | None = typer.Option(None, "--expect-driver", help="the image's driver"),
    expect_cuda: str | None = typer.Option(None, "--expect-cuda", help="the image's CUDA version"),
    kernel_log_since: str | None = typer.Option(
        None, "--kernel-log-since", metavar="ISO",
        help="judge only kernel log lines from this time on (this node's clock, e.g. `date --iso-8601=ns`); "
             "default: the whole log"),
    json_out: bool = JsonOpt,
) -> None:
    """Run the profile's checks on this node; exit 0 only if every check passed."""
    code, res = node_cli.run_node(profile, level, out, skip, expect_driver, expect_cuda,
                                  progress=not json_out, kernel_log_since=kernel_log_since)
    if isinstance(res, str):
        fail(res, code)
    if json_out:
        emit_json({"verdict": res.verdict, "result": str(out / "result.json"),
                   "checks": [{"name": c.name, "verdict": c.verdict, "reason": c.reason}
                              for c in res.checks]})
    else:
        emit_table(f"burn-in {res.profile} ({res.level}): {res.verdict}",
                   ["check", "verdict", "reason"],
                   [(c.name, c.verdict, c.reason[:120]) for c in res.checks])
    raise typer.Exit(code)


@app.command("parse")
def parse(
    kind: str = typer.Argument(..., help=f"one of {', '.join(node_cli.PARSE_KINDS)}"),
    file: Path = typer.Argument(..., help="the tool's saved output"),
    collective: str | None = typer.Option(None, "--collective", help="nccl: which collective"),
    json_out: bool = JsonOpt,
) -> None:
    """Parse a saved dcgmi / nccl-tests / ibstat / kernel log / nvidia-smi output."""
    if kind not in node_cli.PARSE_KINDS:
        fail(f"unknown parser {kind!r}; known: {', '.join(node_cli.PARSE_KINDS)}", BAD_INPUT)
    code, doc = node_cli.parse_file(kind, file, collective)
    if code != 0:
        error_exit(str(doc.get("reason") or doc), code, file=str(file), extra=doc, as_json=json_out)
    if json_out:
        emit_json(doc)
    else:
        emit_table(f"{kind}: {file.name}", ["field", "value"],
                   [(k, v if not isinstance(v, list) else f"{len(v)} item(s)") for k, v in doc.items()])
    raise typer.Exit(code)


@app.command("judge")
def judge(
    result: Path = typer.Argument(..., help="a result.json written by burnin run"),
    profile: str = typer.Option(..., "--profile", help="SKU profile to judge against"),
    json_out: bool = JsonOpt,
) -> None:
    """Judge a stored result against a profile (exit 0 only if it passes)."""
    code, doc = node_cli.judge_file(result, profile)
    if "error" in doc:
        error_exit(str(doc["error"]), code, file=str(result), extra={k: v for k, v in doc.items() if k != "error"},
                   as_json=json_out)
    if json_out:
        emit_json(doc)
    else:
        emit_table(f"judge {result} against {profile}: {'pass' if doc['passed'] else 'FAIL'}",
                   ["check", "verdict", "measured", "threshold", "reason"],
                   [(c["name"], c["verdict"], str(c["measured"])[:40], str(c["threshold"])[:30],
                     c["reason"][:100]) for c in doc["checks"]])
    raise typer.Exit(code)
