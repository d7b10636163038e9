"""SGLang launch commands and scenarios, both ways: ``from_command`` reads ``python -m
sglang.launch_server ...`` into a scenario, ``to_command`` prints the flags that realise one.

- ``flags``: every flag SGLang's launch_server knows, with the type and choices its parser checks (data
  extracted from the released wheels), and a command line split into canonical flag -> value: unknown
  flags and values SGLang refuses are errors naming them; flags of older releases are read as SGLang
  renamed them, or refused naming the releases that had them.
- ``table``: the flags the simulator models, one row each: SGLang flag <-> scenario fields, with
  SGLang's defaults.
- ``models``: model presets by Hugging Face id, with their context lengths.
- ``convert``: the two directions, and the scenario YAML from-sglang writes.
"""

from .convert import Conversion, from_command, normalised, scenario_yaml, to_command
from .flags import SGLANG_VERSION, SglangArgsError, parse_command

__all__ = [
    "SGLANG_VERSION",
    "Conversion",
    "SglangArgsError",
    "from_command",
    "normalised",
    "parse_command",
    "scenario_yaml",
    "to_command",
]
