"""The grammars the server, the lab panel and the chart share, read from grammars.json (pure).

grammars.json is their one definition: each pattern is written so that Python's `re`,
JavaScript's RegExp and JSON Schema read it alike (anchored with ^ and $, no named groups;
match it with `fullmatch`, since Python's `$` also matches before a final newline), with
the cases every spelling is tested against: this package (tests/unit/test_grammars.py), the
lab panel (labextension/test/grammars.spec.ts) and the chart's values schema.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

GRAMMARS_FILE = Path(__file__).with_name("grammars.json")
GRAMMARS = json.loads(GRAMMARS_FILE.read_text(encoding="utf-8"))

# Kubernetes' quantity grammar, without a sign: groups (number, suffix).
QUANTITY_PATTERN = re.compile(GRAMMARS["quantity"]["pattern"])
# Exponents beyond this are out of any range (the API server itself stalls on
# "1e9999999999" instead of refusing it).
MAX_EXPONENT_DIGITS: int = GRAMMARS["quantity"]["max_exponent_digits"]

JOB_NAME_PATTERN = re.compile(GRAMMARS["job_name"]["pattern"])
MAX_JOB_NAME_LENGTH: int = GRAMMARS["job_name"]["max_length"]
ENV_NAME_PATTERN = re.compile(GRAMMARS["env_name"]["pattern"])
