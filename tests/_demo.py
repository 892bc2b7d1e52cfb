"""A scratch checkout holding scripts/demo and what its install part reads, for running it."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def scratch_checkout(checkout: Path) -> Path:
    """scripts/demo, scripts/fetch-axe, setup.cfg and pyproject.toml copied into ``checkout``,
    with axe-core present (so fetch-axe has nothing to fetch)."""
    (checkout / "scripts").mkdir(parents=True)
    for name in ("scripts/demo", "scripts/fetch-axe", "setup.cfg", "pyproject.toml"):
        shutil.copy2(ROOT / name, checkout / name)
    version = re.search(r"^VERSION=(\S+)$", (ROOT / "scripts/fetch-axe").read_text(), re.M).group(1)
    axe = checkout / "tests/browser/.axe" / f"axe-core-{version}.min.js"
    axe.parent.mkdir(parents=True)
    axe.write_text("/* present */")
    return checkout
