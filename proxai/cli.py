"""Command line: ``proxai serve`` and ``proxai demo``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from functools import partial

import trio

from .config import ConfigError
from .config_file import load_config
from .ops.request_log import configure as configure_logging

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
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes sharing the port (server.workers, default 1)",
    )
    p.add_argument("--log-level", help="logging level (logging.level, default info)")


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
    from .config_file import limits_warnings, route_warnings, server_warnings, state_warnings
    from .policy.auth import ClientKeys
    from .service.server import ignore_late_signals, serve

    try:
        config = load_config(
            args.config,
            overrides={
                "server": {"host": args.host, "port": args.port, "workers": args.workers},
                "upstream": {"base_url": args.upstream, "api_key": args.api_key},
            },
        )
        ClientKeys.from_config(config.auth)  # a bad keys file stops start-up here
    except (ConfigError, OSError) as exc:
        print(f"proxai: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.logging, args.log_level)
    log = logging.getLogger("proxai")
    warnings = [
        *route_warnings(config),
        *server_warnings(config),
        *state_warnings(config),
        *limits_warnings(config),
    ]
    for warning in warnings:
        log.warning("%s", warning)
    upstreams = ", ".join(
        f"{name}={u.url} ({u.protocol.value})" for name, u in config.all_upstreams()
    )
    if config.server.workers > 1:
        from .service.workers import run_workers

        log.info("upstreams: %s", upstreams)
        return run_workers(config, args.log_level)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, config, handle_signals=True))
            log.info("proxai listening on %s, upstreams: %s", ", ".join(binds), upstreams)

    trio.run(run)
    ignore_late_signals()
    log.info("proxai stopped")
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
