"""``animfleet``: the fleet's processes, the operator's commands and the local fleet; the
offline tools' commands (training, simulation, the demo) when ``tools`` is installed.

Building the parser must stay cheap (``animfleet --help`` in well under a second): this module
and the parser modules it calls import only the standard library at module level; each command
imports what it runs. A production process never imports ``tools``: its commands are registered
by module name, and only when the command line asks for one that is not the launcher's own.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from launcher.command_errors import user_error
from launcher.deploy_commands import add_deploy_commands
from launcher.job_commands import add_job_commands
from launcher.keys_commands import add_keys_commands
from launcher.local_command import add_local_commands
from launcher.processes import add_process_commands
from launcher.usage_command import add_usage_command

# Each adds its commands to the subparsers it is given. Another group of commands is one more
# line here (its module imports only argument definitions at module level).
COMMAND_GROUPS = (
    add_process_commands,  # worker, router, web, webhooks, scheduler, sweeper
    add_job_commands,  # submit, get, cancel, list, download
    add_local_commands,  # local up
    add_keys_commands,  # keys create|list|revoke|rotate|webhook-secret|limits
    add_deploy_commands,  # deploy set|apply|promote|status
    add_usage_command,  # usage --tenant T [--csv]
)
# The offline tools' commands (model, train, eval, simulate, plan, demo, ...): ``tools`` is
# named here, not imported, so that nothing the fleet runs depends on it.
OFFLINE_COMMANDS = "tools.offline_commands:add_offline_commands"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none (None, or off for a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose help shows defaults; its subcommands' parsers are the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked, keeping ``--help`` fast."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("animfleet")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "unknown (not installed)"
        print(f"{parser.prog} {found}")
        parser.exit()


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (after the global options), or None (``--help``, none)."""
    words = iter(argv)
    for word in words:
        if word == "--fleet":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _launcher_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The launcher's own commands: the parser and its subparsers."""
    parser = _Parser(
        prog="animfleet", description="Run the fleet's processes, its operations and its tools."
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument(
        "--fleet", help="topology file (default: $ANIMFLEET_FLEET_FILE or the built-in one)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_commands in COMMAND_GROUPS:
        add_commands(sub)
    return parser, sub


def _add_offline_commands(sub: Any) -> None:
    """The offline tools' commands, when ``tools`` is installed (a slim install has none)."""
    module, _, function = OFFLINE_COMMANDS.partition(":")
    try:
        add_offline = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as error:
        if error.name is None or not (module + ".").startswith(error.name + "."):
            raise  # tools is there but misses a module: a bug, not a slim install
        return
    add_offline(sub)


def build_parser() -> argparse.ArgumentParser:
    """Every command, the offline tools' included."""
    parser, sub = _launcher_parser()
    _add_offline_commands(sub)
    return parser


def parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser ``argv`` needs: the launcher's alone for its own commands (the fleet's
    processes never import ``tools``), every command for the rest (``--help`` included)."""
    parser, sub = _launcher_parser()
    if _chosen_command(argv) not in sub.choices:
        _add_offline_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser_for(argv).parse_args(argv)
    run = args.func if hasattr(args, "func") else args.handler
    try:
        result: int = run(args)
    except Exception as error:
        known = user_error(error)
        if known is None:
            raise
        message, code = known
        print(f"animfleet: error: {message}", file=sys.stderr)
        return code
    return result


if __name__ == "__main__":
    sys.exit(main())
