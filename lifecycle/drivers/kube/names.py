"""The Kubernetes driver's view of label and taint errors: the model's rules, worded per part.

Why it exists: a label or taint racklife writes must be one kube-apiserver
accepts, and the check belongs at the boundary where racklife renders the
value (``KubeDriver.set_pool_from``), not first in a 422 from a cluster. The
rules and apimachinery's words live in ``lifecycle.model.vocab`` (one
validator per vocabulary); the inventory, the manifest renderer and the
lab's API stand-in call the same functions, so none can disagree. This
module only says which part (``key:``/``value:``) a reason is about.
"""

from __future__ import annotations

from lifecycle.model.vocab import TAINT_EFFECTS, label_value_errors, qualified_name_errors

EFFECTS = TAINT_EFFECTS


def label_errors(key: str, value: str) -> list[str]:
    """Why ``key=value`` is not a label kube-apiserver accepts (empty when it is)."""
    return [f"key: {e}" for e in qualified_name_errors(key)] + [f"value: {e}" for e in label_value_errors(value)]


def taint_errors(key: str, value: str) -> list[str]:
    """Why a taint's key and value would be refused (its effect is checked when it is parsed)."""
    return label_errors(key, value)
