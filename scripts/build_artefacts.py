"""Rebuild the trained artefacts that ship with lmsci-mi (``lmsci_mi/data/artefacts/``), seeded.

    .venv/bin/python scripts/build_artefacts.py cfg|steer|sae|all [--retrain] [--small]

Each artefact's builder (``lmsci_mi.artefacts.ARTEFACT_BUILDERS``) trains it with the library's
default settings, or reads it from the cache when it is there (``--retrain`` trains anyway: the
CFG GPT takes about 8 min on two CPU cores, the steer 5 min, the SAE 25 min). Its files are copied
into the package and recorded in ``manifest.json`` with their sha256, the settings, and the
figures of a small rebuild, which ``tests/integration/test_artefacts.py`` repeats and compares.
``--small`` only prints the small rebuild's figures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time

from lmsci_mi.artefacts import ARTEFACT_BUILDERS, BUILDER_MODULES, record_artefact


def main() -> int:
    for module in BUILDER_MODULES:
        importlib.import_module(module)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="+", choices=[*ARTEFACT_BUILDERS.names(), "all"])
    parser.add_argument("--retrain", action="store_true", help="train even when cached")
    parser.add_argument("--small", action="store_true", help="only print the small rebuild")
    args = parser.parse_args()
    names = ARTEFACT_BUILDERS.names() if "all" in args.names else args.names
    for name in names:
        builder = ARTEFACT_BUILDERS.get(name)
        start = time.perf_counter()
        small = builder.function(small=True)
        print(
            f"{name}: small rebuild in {time.perf_counter() - start:.0f} s: {dict(small.figures)}"
        )
        if args.small:
            continue
        start = time.perf_counter()
        full = builder.function(small=False, retrain=args.retrain)
        artefact = record_artefact(
            name,
            list(full.files),
            description=builder.description,
            rebuild=f"python scripts/build_artefacts.py {name} --retrain",
            params={**full.params, "figures": dict(full.figures)},
            small={"params": dict(small.params), "figures": dict(small.figures)},
        )
        size = sum(f.bytes for f in artefact.files) / 1e6
        print(f"{name}: built in {time.perf_counter() - start:.0f} s; shipped {size:.2f} MB:")
        print(json.dumps([f.path for f in artefact.files], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
