"""``[system] engine`` in the mapping and placement kinds, read as the grid kind reads it: a name
of no profile is refused with the grid's message (exit 2); a named instance that names none is
priced by the physics alone."""

from __future__ import annotations

import re

import pytest

from codesign.kinds.registry import load, named_paths

GRID = "dgx-llama70b-power-cap"
MAPPING_OR_PLACEMENT = ["tiny-pf-mapping", "tiny-placement-mixtral"]


def with_engine(name: str, engine: str, tmp_path) -> str:
    text = named_paths()[name].read_text()
    text = re.sub(r'^name = ".*"$', 'name = "with_engine"', text, count=1, flags=re.M)
    if re.search(r"^engine = ", text, flags=re.M):  # a grid instance names its engine under [system]
        text = re.sub(r'^engine = "[^"]*"', f'engine = "{engine}"', text, count=1, flags=re.M)
    else:
        text += f'\n[system]\nengine = "{engine}"\n'
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", [GRID, *MAPPING_OR_PLACEMENT])
def test_an_unknown_engine_exits_2_with_the_grids_message(name, cli, input_error, tmp_path):
    input_error(cli("evaluate", with_engine(name, "trtllm-9", tmp_path)), "unknown engine 'trtllm-9'",
                "one of: sglang, trtllm-0.14", "did you mean 'trtllm-1.x'?")


@pytest.mark.parametrize("name", MAPPING_OR_PLACEMENT)
def test_the_named_tiny_instances_name_no_engine(name):
    assert load(named_paths()[name]).inst.spec.system.engine is None
