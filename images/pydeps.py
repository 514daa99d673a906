"""Print the Python requirements of pyproject.toml (and the given extras), one a line.

Image builds install these in a layer of their own before copying paddle_ext/, so a code
change reinstalls only the package (pip install --no-deps), never its dependencies.
    python3 pydeps.py pyproject.toml [EXTRA...] > requirements.txt
"""
import sys
import tomllib


def requirements(pyproject_path, extras):
    with open(pyproject_path, "rb") as fh:
        project = tomllib.load(fh)["project"]
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1], sys.argv[2:])))
