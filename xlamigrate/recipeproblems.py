"""The rules whose findings say a step of the recipe stayed out of a script (no model found, no
forward pass, a condition the step cannot be put under...): the planner's steps emit them, and
the project's deciding reads them off a launched script's plan (its recipe did not go in
whole). Codes only, so that the deciding process loads none of the planner to ask."""

from __future__ import annotations

MODEL_NOT_IDENTIFIED = "XM401"
FORWARD_PASS_NOT_LOCATED = "XM402"
CONDITION_NOT_EXPRESSIBLE = "XM403"
OPTIMIZER_NOT_IDENTIFIED = "XM406"
OPTIMIZER_NOT_WRAPPABLE = "XM408"
MODEL_CAST_BY_SCRIPT = "XM410"

RECIPE_PROBLEMS = (
    MODEL_NOT_IDENTIFIED,
    FORWARD_PASS_NOT_LOCATED,
    CONDITION_NOT_EXPRESSIBLE,
    OPTIMIZER_NOT_IDENTIFIED,
    OPTIMIZER_NOT_WRAPPABLE,
    MODEL_CAST_BY_SCRIPT,
)
