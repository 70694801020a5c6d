"""A throw-away copy of the tree under test (what git tracks plus new files it does not ignore), shared by
the planted-bug check and the mutation run: neither ever edits the working tree."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def files(root: Path = ROOT) -> list[str]:
    """Paths of the tree: tracked files and untracked ones git does not ignore, that exist."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                         check=True, capture_output=True).stdout.decode()
    return [p for p in out.split("\0") if p and (root / p).is_file()]


def copy_tree(dest: Path | None = None, root: Path = ROOT) -> Path:
    """Copy the tree into ``dest`` (a new temporary folder when None) and return it."""
    dest = Path(tempfile.mkdtemp(prefix="stackreceipt-mut-")) if dest is None else dest
    for rel in files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dest
