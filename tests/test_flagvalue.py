"""Flag values are read the way torch-xla's GetEnvBool reads them."""

from __future__ import annotations

import pytest

from xlamigrate.flagvalue import FlagValue, torch_xla_enabled


@pytest.mark.parametrize("value", ["1", "2", "-1", "true", " 1", "\t7", "1abc", "+3"])
def test_values_torch_xla_reads_as_on(value: str) -> None:
    assert torch_xla_enabled(value) is True


@pytest.mark.parametrize(
    "value", ["0", "", "false", "True", "TRUE", "yes", "on", "abc", "00", "-0"]
)
def test_values_torch_xla_reads_as_off(value: str) -> None:
    assert torch_xla_enabled(value) is False


def test_literal_value_reports_its_state() -> None:
    on, off = FlagValue(("1",)), FlagValue(("0",))
    assert (on.literal, on.enabled, on.may_be_off) == ("1", True, False)
    assert (off.literal, off.enabled, off.may_be_off) == ("0", False, True)
    assert on.describe() == '"1" (on)'


def test_conditional_value_has_no_single_literal() -> None:
    value = FlagValue(("1", "0"))
    assert value.literal is None
    assert value.enabled is None
    assert value.is_conditional and value.may_be_off
    assert value.describe() == '"1" or "0" depending on a condition'


def test_conditional_with_agreeing_branches_is_still_decided() -> None:
    assert FlagValue(("1", "true")).enabled is True


def test_unknown_value_may_be_off() -> None:
    value = FlagValue.unknown()
    assert (value.literal, value.enabled, value.may_be_off) == (None, None, True)
    assert value.describe() == "a value not known statically"
