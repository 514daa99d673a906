"""values.schema.yaml (hand-written) -> values.schema.json (what helm reads).

    python3 helm/schema.py            # write helm/paddlecloud-hub/values.schema.json
    python3 helm/schema.py --check    # exit 1 if the JSON is not what the YAML gives

`make helm-schema` runs the first; tests/helm runs the check.
"""

import argparse
import json
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parent / "paddlecloud-hub"
SOURCE = CHART / "values.schema.yaml"
TARGET = CHART / "values.schema.json"


def rendered() -> str:
    return json.dumps(yaml.safe_load(SOURCE.read_text(encoding="utf-8")), indent=2, ensure_ascii=False) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the JSON is up to date")
    args = parser.parse_args(argv)
    text = rendered()
    if args.check:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is out of date: run `make helm-schema`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
