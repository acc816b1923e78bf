"""Command line: ``proxai serve`` and ``proxai demo``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from functools import partial

import trio

from .config import ConfigError, load_config

__all__ = ["main"]


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the proxy",
        description="Run proxai. Settings come from --config (TOML, see docs/configuration.md); "
        "the options below override it.",
    )
    p.add_argument("--config", metavar="FILE", help="TOML configuration file")
    p.add_argument("--host", help="address to listen on (server.host, default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, help="port to listen on (server.port, default 8080; 0 picks one)"
    )
    p.add_argument(
        "--upstream", metavar="URL", help="upstream base URL, e.g. https://api.openai.com/v1"
    )
    p.add_argument("--api-key", metavar="KEY", help="key proxai sends upstream (upstream.api_key)")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def _demo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from .demo import add_demo_arguments

    p = sub.add_parser(
        "demo",
        help="play the seed exchange through proxai with the openai SDK",
        description="Start a scripted upstream that plays the seed document's Responses exchange "
        "and proxai in front of it, all on loopback, then drive them with the official openai SDK: "
        "turn 1 (get_weather + web_search), turn 2 (function_call_output), then turn 1 replayed "
        "with an upstream that stalls mid-arguments, through proxai and directly. "
        "Needs no network and no API key.",
    )
    add_demo_arguments(p)


def _serve(args: argparse.Namespace) -> int:
    from .server import serve, wait_for_signal

    try:
        config = load_config(
            args.config,
            overrides={
                "server": {"host": args.host, "port": args.port},
                "upstream": {"base_url": args.upstream, "api_key": args.api_key},
            },
        )
    except ConfigError as exc:
        print(f"proxai: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, config, shutdown_trigger=wait_for_signal))
            upstreams = ", ".join(
                f"{name}={u.url} ({u.protocol.value})" for name, u in config.all_upstreams()
            )
            logging.getLogger("proxai").info(
                "proxai listening on %s, upstreams: %s", ", ".join(binds), upstreams
            )

    trio.run(run)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="proxai", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _demo_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    from .demo import run_demo

    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())
