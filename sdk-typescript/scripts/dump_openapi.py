"""Write the gateway's OpenAPI document, as ``GET /openapi.json`` serves it, to a file.

``python scripts/dump_openapi.py openapi.json``: the app is built as ``animfleet web`` builds it,
around a client whose broker is never reached (the document needs no fleet). The checkout this
file belongs to is imported, not whichever animfleet happens to be installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def document() -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from animfleet.topology import Topology
    from dispatcher import Client
    from dispatcher.gateway import GatewaySettings, create_app

    # Port 9 (discard): nothing answers, and building the app reads nothing from the broker.
    regions = {"local": {"broker_url": "redis://127.0.0.1:9/0"}}
    client = Client(Topology.from_mapping({"regions": regions}))
    try:
        served: dict[str, Any] = create_app(client, GatewaySettings(region="local")).openapi()
    finally:
        client.close()
    return served


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: dump_openapi.py OUT.json", file=sys.stderr)
        return 2
    Path(argv[1]).write_text(render(document()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
