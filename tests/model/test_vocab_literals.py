"""Each Literal vocabulary has one list of values, read off the type, and the inventory refuses anything else.

The acceptance level is burn-in's (``burnin.levels``), the leave policy the
controller's (``lifecycle.model.vocab``); a pool names both. Before, the
levels were written out in six places and the policies in five, so a new
value added to one list was refused, or silently accepted, by another.
"""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from burnin import levels
from burnin import profiles as burnin_profiles
from lifecycle.model import vocab
from lifecycle.model.inventory import Pool


def test_the_tuples_are_the_literals() -> None:
    assert levels.LEVELS == get_args(levels.Level) == ("quick", "standard", "full")
    assert vocab.LEVELS is levels.LEVELS and burnin_profiles.LEVELS is levels.LEVELS
    assert vocab.LEAVE_POLICIES == get_args(vocab.LeavePolicy) == ("wait", "requeue", "cancel")
    assert vocab.KEEP_JOBS_POLICIES == get_args(vocab.KeepJobsPolicy) == ("wait", "requeue")
    assert set(vocab.KEEP_JOBS_POLICIES) < set(vocab.LEAVE_POLICIES) and "cancel" not in vocab.KEEP_JOBS_POLICIES


def test_the_level_checker_returns_a_level_or_names_the_levels() -> None:
    assert [levels.level(v) for v in ("quick", "standard", "full")] == list(levels.LEVELS)
    for bad in ("extreme", "QUICK", " quick", ""):
        with pytest.raises(ValueError, match=r"^must be one of quick, standard, full$"):
            levels.level(bad)


@pytest.mark.parametrize(("field", "valid"), [("retest_level", levels.LEVELS),
                                               ("leave_policy", vocab.LEAVE_POLICIES)])
def test_a_pool_takes_each_value_of_its_vocabulary_and_no_other(field: str, valid: tuple[str, ...]) -> None:
    assert [getattr(Pool.model_validate({"scheduler": "slurm", "partition": "gpu", field: v}), field) for v in valid] == list(valid)
    with pytest.raises(ValidationError) as info:
        Pool.model_validate({"scheduler": "slurm", "partition": "gpu", field: "extreme"})
    [err] = info.value.errors(include_url=False)
    assert err["loc"] == (field,) and all(repr(v) in err["msg"] for v in valid), err
