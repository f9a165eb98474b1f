"""Write the SDK's synchronous client from its asynchronous one, as httpx does with unasync.

``python -m tools.generate_sync_sdk`` rewrites ``animfleet_sdk/_sync_client.py``; with
``--check`` it only says whether that file is what the async source generates (a test runs
that). The rewrite is by words: ``async``/``await`` dropped, each async name replaced by its
sync twin (:data:`NAMES`), then ruff fixes (``yield from`` where a loop only yields) and
formats the result.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "animfleet_sdk" / "_async_client.py"
TARGET = ROOT / "animfleet_sdk" / "_sync_client.py"
DOCSTRING = (
    '"""The synchronous client of the HTTP API, generated from ``_async_client.py`` by\n'
    "``tools/generate_sync_sdk.py`` (``make generate-sdk-sync``): edit that file, not this "
    'one."""'
)
# Each async name and its sync twin; whole words only.
NAMES = {
    "asyncio.sleep": "time.sleep",
    "AsyncAnimfleet": "Animfleet",
    "AsyncClient": "Client",
    "AsyncIterator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
}
KEYWORDS = re.compile(r"\basync (?=def |with |for )|\bawait ")


def generate(source: str) -> str:
    """The sync module for the async module ``source``, fixed and formatted by ruff."""
    docstring = re.match(r'\s*""".*?"""', source, flags=re.DOTALL)
    if docstring is None:
        raise ValueError("the async client must open with a docstring")
    text = DOCSTRING + source[docstring.end() :]
    text = re.sub(r"^import asyncio\n", "", text, flags=re.MULTILINE)
    text = KEYWORDS.sub("", text)
    for name, twin in NAMES.items():
        text = re.sub(rf"\b{re.escape(name)}\b", twin, text)
    if re.search(r"\basync\b|\bawait\b|\bAsync", text):
        raise ValueError("an async construct is left that the generator does not rewrite")
    for ruff in (["check", "--fix-only", "--unsafe-fixes", "--quiet"], ["format", "--quiet"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *ruff, "--stdin-filename", str(TARGET), "-"],
            input=text,
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        text = done.stdout
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on drift")
    args = parser.parse_args(argv)
    expected = generate(SOURCE.read_text())
    if args.check:
        if TARGET.read_text() != expected:
            print(f"{TARGET.relative_to(ROOT)} is stale: run python -m tools.generate_sync_sdk")
            return 1
        return 0
    TARGET.write_text(expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
