"""Fuzz the HTTP API from its OpenAPI document for a few minutes, with an API key, every check on.

Starts a one-region local fleet (a stand-in model, a gateway with keys on), makes a key, then
runs Schemathesis' own command line against the gateway: generated valid and invalid requests
for every operation, with all of its checks (no 5xx, responses that match the schema, valid
requests accepted, invalid ones refused, headers and status codes as documented; the one
allowance is explained in ``schemathesis.toml`` beside this file). Submits carry a real image
(``fuzz_hooks.py``), so the stateful phase reaches every route with a real job id. Exits with
Schemathesis' code.

    python -m benchmarks.fuzz_api --minutes 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

from animfleet.region.tenants import Tenants
from launcher.local_fleet import LocalFleet

STANDIN = "tests.fixtures.standin:StandinAnimator"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=2, help="concurrent Schemathesis workers")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as root,
        LocalFleet(
            Path(root) / "fleet",
            regions=("fz",),
            workers_per_region=1,
            model_dir=Path("standin:0.2:0"),
            animator=STANDIN,
            gateway=True,
            gateway_auth=True,
        ) as fleet,
    ):
        key = Tenants(redis.Redis.from_url(fleet.redis_url("fz"))).create_key("fuzz").key
        command = [
            str(Path(sys.executable).with_name("schemathesis")),
            "--config-file",
            str(Path(__file__).with_name("schemathesis.toml")),
            "run",
            fleet.gateway_url("fz") + "/openapi.json",
            "--checks",
            "all",
            "--max-time",
            str(int(args.minutes * 60)),
            "--workers",
            str(args.workers),
            "--header",
            f"Authorization: Bearer {key}",
        ]
        shown = [part if key not in part else "Authorization: Bearer <key>" for part in command]
        print(" ".join(shown), flush=True)
        # Real images in submits, so the stateful phase follows its links with real job ids.
        env = os.environ | {"SCHEMATHESIS_HOOKS": "benchmarks.fuzz_hooks"}
        return subprocess.run(command, check=False, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
