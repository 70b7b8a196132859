"""Regenerate docs/state-machine.md from the state machine's table (a test checks it is current)."""

from __future__ import annotations

import sys
from pathlib import Path

from lifecycle.model.states import RULES, mermaid

HEADER = """# The node state machine

Generated from `lifecycle/model/states.py` by `python scripts/gen_docs.py`; do not edit by hand
(`tests/model/test_docs.py` fails when this file is out of date).

Each arrow is one row of the transition table: `event (who may request it)`. `[acceptance]` marks
the gate: `join` and `reclaim` need a passing, unexpired acceptance record made after the node's last build.
Actors: `operator` (a person, through the CLI or a stack), `workflow` (a racklife workflow step),
`health` (a health check that found a fault).

```mermaid
"""


def render() -> str:
    rows = "\n".join(
        f"| `{r.source.value}` | `{r.event}` | `{r.target.value}` | {', '.join(sorted(a.value for a in r.actors))} |"
        + (" acceptance record |" if r.needs_acceptance else " |")
        for r in RULES
    )
    return (HEADER + mermaid() + "```\n\n## The table\n\n| from | event | to | who may request | gate |\n"
            "|---|---|---|---|---|\n" + rows + "\n")


if __name__ == "__main__":
    out = Path(__file__).resolve().parents[1] / "docs" / "state-machine.md"
    out.write_text(render())
    sys.stdout.write(f"wrote {out}\n")
