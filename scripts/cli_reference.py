"""Write docs/cli.md, the reference of ``sparkflux run``'s options, from the command's parser
(itself generated from ``RunOptions``). tests/unit/surface/test_run_options_typed.py checks the page
matches.

    .venv/bin/python scripts/cli_reference.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sparkflux.cli import reference_page  # noqa: E402

if __name__ == "__main__":
    (ROOT / "docs" / "cli.md").write_text(reference_page())
    print(f"wrote {ROOT / 'docs' / 'cli.md'}")
