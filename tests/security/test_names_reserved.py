"""Names that would become the tree's own files or Windows devices are refused in both modes."""

from __future__ import annotations

import pytest

from registry_gen.errors import InvalidName
from registry_gen.names import is_valid_name, validate_name


@pytest.mark.parametrize("name", ["index.html", "abbreviated.json", "con", "NUL", "aux", "prn", "com1", "LPT9", "@scope/con", "@scope/index.html"])
@pytest.mark.parametrize("legacy", [False, True])
def test_reserved_names_are_refused(name: str, legacy: bool) -> None:
    with pytest.raises(InvalidName) as refused:
        validate_name(name, legacy=legacy)
    if legacy or name == name.lower():  # an upper-case new name is refused for its case first
        assert "reserved" in str(refused.value)


@pytest.mark.parametrize("name", ["@con/pkg", "console", "com10", "index-html", "auxiliary"])
def test_neighbours_of_reserved_names_stay_valid(name: str) -> None:
    assert is_valid_name(name)
