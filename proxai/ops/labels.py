"""Model names as metric labels: bounded, so that no client can grow a metric.

Prometheus (:mod:`proxai.ops.metrics`) and the GenAI metrics of
:mod:`proxai.ops.telemetry` label by model through the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..outcome import Outcome

__all__ = ["MAX_MODELS", "MAX_MODEL_LENGTH", "OTHER_MODEL", "ModelLabels"]

#: Distinct model names kept as label values per process by default (``metrics.max_models``),
#: besides the models routes name exactly and ``metrics.models``; the rest count as
#: "other", so clients naming random models cannot grow the metrics without bound.
MAX_MODELS = 100
MAX_MODEL_LENGTH = 100
OTHER_MODEL = "other"


class ModelLabels:
    """The model label of an outcome: a model of ``named`` (those routes name exactly,
    and ``metrics.models``) is always its own; another that an upstream served (a 2xx
    answer) gets one of the first ``max_models`` slots; refused, failed and odd names
    count as "other". No client can grow the metrics, nor crowd out the models the
    configuration names (an accepting upstream can serve any name, so serving alone
    proves nothing)."""

    def __init__(self, named: Iterable[str] = (), max_models: int = MAX_MODELS) -> None:
        self._named = frozenset(named)
        self._max_models = max_models
        self._models: set[str] = set()  # the others given a label, at most max_models

    def __call__(self, outcome: Outcome) -> str:
        model = outcome.model
        if model is None:
            return ""
        if model in self._named or model in self._models:
            return model
        served = outcome.status is not None and 200 <= outcome.status < 300
        if served and len(model) <= MAX_MODEL_LENGTH and len(self._models) < self._max_models:
            self._models.add(model)
            return model
        return OTHER_MODEL
