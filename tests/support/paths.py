"""Where the tests' data lives: the repository, its own fixtures, and the real engines' captures.

The captures sit in ``shared/fixtures`` beside the checkout (CI lays a copy there); a checkout that
holds its own ``shared/`` folder is looked in first.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_FIXTURES = REPO_ROOT / "tests" / "fixtures"


def _shared_fixtures() -> Path:
    for candidate in (REPO_ROOT / "shared" / "fixtures", REPO_ROOT.parent / "shared" / "fixtures"):
        if candidate.is_dir():
            return candidate
    return REPO_ROOT.parent / "shared" / "fixtures"


SHARED_FIXTURES = _shared_fixtures()
