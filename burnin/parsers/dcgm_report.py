"""The parsed ``dcgmi diag`` document, shared by the JSON and the text-table readers.

Both readers end in :func:`finish`, so the two rules that keep a partial run from
passing live in one place: the level that ran is taken from the output (and marked
``level_inferred`` when it comes from the categories or tests present rather than from
the command line), and every test that level runs must be present. DCGM renamed its
tests between 3.x (``Persistence Mode``, ``Targeted Power``) and 4.x (``software``,
``targeted_power``), so each level lists the accepted spellings of each test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from burnin.parsers import ParseError

TestResult = Literal["pass", "fail", "skip", "warn"]
Format = Literal["dcgm3-json", "dcgm4-json", "text"]
LevelBasis = Literal["command", "content", "none"]

# DCGM's words (3.x capitalised, 4.x lowercase, text table) → ours.
_STATUS: dict[str, TestResult] = {
    "pass": "pass",
    "passed": "pass",
    "fail": "fail",
    "failed": "fail",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
    "warn": "warn",
    "warning": "warn",
}
# When a test has several results (one per GPU), the worst one is the test's result.
_SEVERITY: dict[TestResult, int] = {"pass": 0, "skip": 1, "warn": 2, "fail": 3}

# The lowest run level at which a category or a test appears (dcgmi-diag reference:
# r1 deployment only, r2 adds integration/hardware, r3 adds stress, r4 the extended
# pulse and memtest plugins). What is present gives a lower bound on the level that ran.
_LEVEL_BY_CATEGORY = {"deployment": 1, "integration": 2, "hardware": 2, "stress": 3}
_LEVEL_BY_TEST = {"pulse test": 4, "pulse_test": 4, "memtest": 4}

# What each level runs, per naming generation: one tuple of accepted spellings per test
# (2.x said "Blacklist" and sometimes "Page Retirement", 3.x "Denylist"; 4.x folded the
# deployment checks into "software"). Lower levels' tests are included by the lookup.
_RUNS: dict[str, dict[int, tuple[tuple[str, ...], ...]]] = {
    "3.x": {
        1: (("denylist", "blacklist"), ("nvml library",), ("cuda main library",),
            ("permissions and os blocks",), ("persistence mode",), ("environment variables",),
            ("page retirement/row remap", "page retirement"), ("graphics processes",)),
        2: (("pcie",), ("gpu memory",)),
        3: (("diagnostic", "sm stress"), ("targeted stress",), ("targeted power",), ("memory bandwidth",)),
    },
    "4.x": {
        1: (("software",),),
        2: (("memory",), ("pcie",)),
        3: (("diagnostic",), ("targeted_stress",), ("targeted_power",), ("memory_bandwidth",)),
    },
}


@dataclass
class DcgmTest:
    name: str
    category: str
    result: TestResult
    gpus: dict[str, TestResult] = field(default_factory=dict)
    details: str = ""


@dataclass
class DcgmReport:
    """One ``dcgmi diag`` run.

    ``level`` is the run level the output shows. ``level_inferred`` is True when it was
    read off the categories/tests present (then it is a lower bound: Stress means r3 or
    above) rather than off the ``dcgmi diag -r N`` command line in the capture;
    ``level_basis`` says which (``command``, ``content``, ``none``) and
    ``level_evidence`` why, in words. ``skipped_required`` names the tests that level
    runs which DCGM skipped (an r3 whose stress tests all skipped is not an r3 pass).
    A level a judge requires must be compared with ``level``, never with the level
    that was asked for.
    """

    format: Format
    level: int | None
    passed: bool
    tests: list[DcgmTest]
    failed_gpus: list[int]
    level_inferred: bool = False
    dcgm_version: str | None = None
    driver_version: str | None = None
    level_basis: LevelBasis = "none"
    level_evidence: str = ""
    skipped_required: list[str] = field(default_factory=list)


def status(word: object) -> TestResult:
    if not isinstance(word, str) or word.strip().lower() not in _STATUS:
        raise ParseError(f"unknown DCGM test status {word!r}")
    return _STATUS[word.strip().lower()]


def worst(results: list[TestResult]) -> TestResult:
    return max(results, key=lambda r: _SEVERITY[r])


def _content_level(tests: list[DcgmTest]) -> tuple[int | None, str]:
    best, why = 0, ""
    for t in tests:
        for level, what in ((_LEVEL_BY_CATEGORY.get(t.category.lower(), 0), f"category {t.category}"),
                            (_LEVEL_BY_TEST.get(t.name.lower(), 0), f"test {t.name}")):
            if level > best:
                best, why = level, what
    if not best:
        return None, ""
    return best, f"{why} present: r{best} or above"


def _generation(tests: list[DcgmTest]) -> str:
    names = {t.name.lower() for t in tests}
    return "4.x" if "software" in names or any("_" in n for n in names) else "3.x"


def _required(tests: list[DcgmTest], level: int) -> list[tuple[str, ...]]:
    runs = _RUNS[_generation(tests)]
    return [spellings for lv in sorted(runs) if lv <= level for spellings in runs[lv]]


def _missing(tests: list[DcgmTest], level: int) -> list[str]:
    names = {t.name.lower() for t in tests}
    return [spellings[0] for spellings in _required(tests, level) if not names & set(spellings)]


def skipped_at(tests: list[DcgmTest], level: int) -> list[str]:
    """The tests that ``level`` runs which DCGM reported as skipped (the judge asks this of the
    level a profile requires, the parser of the level that ran)."""
    wanted = {name for spellings in _required(tests, level) for name in spellings}
    return [t.name for t in tests if t.name.lower() in wanted and t.result == "skip"]


def finish(
    fmt: Format,
    command_level: int | None,
    tests: list[DcgmTest],
    dcgm_version: str | None,
    driver_version: str | None,
) -> DcgmReport:
    """Check the run is whole for its level, then summarise it."""
    if not tests:
        raise ParseError("DCGM output holds no test results")
    seen, why = _content_level(tests)
    level: int | None
    basis: LevelBasis
    if command_level is not None:
        if seen is not None and seen > command_level:
            raise ParseError(f"the capture says dcgmi diag -r {command_level} but holds {why}: contradictory")
        level, basis, evidence = command_level, "command", f"dcgmi diag -r {command_level} in the capture"
    else:
        level, basis, evidence = seen, ("content" if seen is not None else "none"), why
    if level is not None and (missing := _missing(tests, level)):
        raise ParseError(f"DCGM r{level} output ({evidence}) lacks test(s) that level runs: "
                         f"{', '.join(missing)}: truncated or edited output, or a run of single tests "
                         "(dcgmi diag -r <test>), not of a whole level")
    failed: set[int] = set()
    for t in tests:
        for gpu, res in t.gpus.items():
            if res == "fail" and gpu.isdigit():
                failed.add(int(gpu))
        if t.result == "fail" and not any(r == "fail" for r in t.gpus.values()):
            failed.update(int(g) for g in re.findall(r"\bGPU (\d+)\b", t.details))
    skipped = skipped_at(tests, level) if level is not None else []
    passed = (all(t.result in ("pass", "skip") for t in tests) and any(t.result == "pass" for t in tests)
              and not skipped)
    return DcgmReport(
        format=fmt,
        level=level,
        passed=passed,
        tests=tests,
        failed_gpus=sorted(failed),
        level_inferred=basis == "content",
        dcgm_version=dcgm_version,
        driver_version=driver_version,
        level_basis=basis,
        level_evidence=evidence,
        skipped_required=skipped,
    )
