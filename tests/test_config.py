"""Configuration loading: strict, every mistake named by its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxai.config import Config, ConfigError, NormalizeConfig, UpstreamKind
from proxai.config_file import load_config

FULL = """
[server]
host = "0.0.0.0"
port = 9000
max_request_body_bytes = 1024
[upstream]
base_url = "https://api.openai.com/v1/"
api_key_env = "PROXAI_TEST_KEY"
[timeouts]
connect = 1
first_byte = 2.5
idle = 3.0
tool_arguments = 4.0
total = 5.0
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proxai.toml"
    path.write_text(text)
    return path


def test_full_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-from-env")
    config = load_config(write(tmp_path, FULL))
    assert config.server.host == "0.0.0.0"
    assert config.server.port == 9000
    assert config.server.max_request_body_bytes == 1024
    assert config.upstream.url == "https://api.openai.com/v1"
    assert config.upstream.resolved_api_key() == "sk-from-env"
    assert (config.timeouts.connect, config.timeouts.first_byte, config.timeouts.total) == (
        1.0,
        2.5,
        5.0,
    )
    assert isinstance(config.timeouts.connect, float)


def test_defaults_with_upstream_override() -> None:
    config = load_config(
        None, overrides={"upstream": {"base_url": "http://u/v1", "api_key": "sk-secret"}}
    )
    assert config == Config(upstream=config.upstream)
    assert config.server.port == 8080
    assert config.server.host == "127.0.0.1"
    assert config.server.max_request_body_bytes == 52428800
    assert config.timeouts.first_byte == 60.0
    assert config.upstream.resolved_api_key() == "sk-secret"
    assert "sk-secret" not in repr(config)  # keys never show up in reprs or logs


def test_overrides_win_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-from-env")
    config = load_config(
        write(tmp_path, FULL),
        overrides={"server": {"port": 1234, "host": None}, "upstream": {"api_key": None}},
    )
    assert config.server.port == 1234
    assert config.server.host == "0.0.0.0"


def test_upstream_is_required() -> None:
    with pytest.raises(ConfigError, match=r"upstream\.base_url.*--upstream"):
        load_config(None)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[server]\nport = 1\nbogus = 2\n", r"server\.bogus: unknown key"),
        ("[nope]\nx = 1\n", r"nope: unknown key"),
        ('[server]\nport = "80"\n', r"server\.port: expected an integer, got a string"),
        ("[server]\nport = 80.5\n", r"server\.port: expected an integer, got a number"),
        ("[timeouts]\nidle = true\n", r"timeouts\.idle: expected a number, got a boolean"),
        ("[timeouts]\nidle = 0\n", r"timeouts\.idle: must be a positive number"),
        ("[timeouts]\ntotal = -1.5\n", r"timeouts\.total: must be a positive number"),
        (
            "[server]\nmax_request_body_bytes = 0\n",
            r"server\.max_request_body_bytes: must be a positive",
        ),
        ("[server]\nport = 70000\n", r"server\.port: must be a port number"),
        ('[upstream]\nbase_url = "ftp://x"\n', r"upstream\.base_url: must be an http"),
        ("server = 3\n", r"server: must be a table"),
        ("[server\n", r"not valid TOML"),
    ],
)
def test_mistakes_stop_start_up_naming_the_key(tmp_path: Path, text: str, named: str) -> None:
    if "base_url" not in text:
        text += '\n[upstream]\nbase_url = "http://u/v1"\n' if "[upstream]" not in text else ""
    with pytest.raises(ConfigError, match=named):
        load_config(write(tmp_path, text))


def test_key_and_key_env_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"api_key and upstream\.api_key_env"):
        load_config(
            write(tmp_path, '[upstream]\nbase_url = "http://u"\napi_key = "a"\napi_key_env = "B"\n')
        )


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config("/nonexistent/proxai.toml")


def test_named_upstreams_and_protocols(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    text = """
[upstream]
base_url = "https://api.openai.com/v1"
api_key = "sk-openai"
[upstreams.claude]
protocol = "anthropic_messages"
base_url = "https://api.anthropic.com/v1"
api_key_env = "ANTHROPIC_API_KEY"
[upstreams.local]
base_url = "http://127.0.0.1:11434/v1"
normalize = { system_to_instructions = true, developer_to_instructions = true }
"""
    config = load_config(write(tmp_path, text))
    assert [name for name, _ in config.all_upstreams()] == ["default", "claude", "local"]
    assert config.upstreams["claude"].protocol is UpstreamKind.ANTHROPIC_MESSAGES
    assert config.upstream.protocol is UpstreamKind.OPENAI
    assert config.upstreams["local"].normalize == NormalizeConfig(True, True)
    assert config.upstreams["local"].protocol is UpstreamKind.OPENAI


def test_only_named_upstreams_is_enough(tmp_path: Path) -> None:
    text = '[upstreams.claude]\nprotocol = "anthropic_messages"\nbase_url = "http://a/v1"\n'
    config = load_config(write(tmp_path, text))
    assert [name for name, _ in config.all_upstreams()] == ["claude"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            '[upstreams.x]\nprotocol = "grpc"\nbase_url = "http://a"\n',
            r"upstreams\.x\.protocol: must be one of 'openai', 'openai_chat', 'openai_responses', "
            r"'anthropic_messages', got 'grpc'",
        ),
        ('[upstreams.x]\napi_key = "k"\n', r"upstreams\.x\.base_url: required key is missing"),
        ('[upstreams.x]\nbase_url = "http://a"\nbogus = 1\n', r"upstreams\.x\.bogus: unknown key"),
        (
            '[upstreams.x]\nbase_url = "http://a"\nnormalize = { system = true }\n',
            r"upstreams\.x\.normalize\.system: unknown key",
        ),
        (
            '[upstream]\nbase_url = "http://a"\n[upstreams.default]\nbase_url = "http://b"\n',
            r"upstreams\.default: the name is taken by \[upstream\]",
        ),
        # half-configured: silently ignored, these would surface only as upstream 401s
        (
            '[upstream]\napi_key = "k"\n[upstreams.x]\nbase_url = "http://b"\n',
            r"upstream\.base_url: required key is missing",
        ),
        (
            '[upstream]\nbase_url = "http://a"\napi_key_env = "PROXAI_SURELY_UNSET"\n',
            r"upstream\.api_key_env: the environment variable PROXAI_SURELY_UNSET is not set",
        ),
    ],
)
def test_upstream_mistakes_name_the_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_config(write(tmp_path, text), environ={})


def test_state_defaults_to_memory_and_takes_a_redis_url(tmp_path: Path) -> None:
    upstream = '[upstream]\nbase_url = "http://u/v1"\n'
    state = load_config(write(tmp_path, upstream)).state
    assert (state.backend, state.url, state.max_bytes) == ("memory", None, 256 * 1024 * 1024)
    assert (state.ttl, state.timeout, state.key_prefix) == (30 * 24 * 3600.0, 1.0, "proxai:")
    assert state.forward_unknown_upstream_ids is False  # refused where tenants share a key
    text = upstream + '[state]\nbackend = "redis"\nurl = "rediss://u:secret@r:6380/2"\nttl = 60\n'
    state = load_config(write(tmp_path, text)).state
    assert (state.backend, state.url, state.ttl) == ("redis", "rediss://u:secret@r:6380/2", 60.0)
    assert "secret" not in repr(state)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[state]\nbackend = "redis"\n', r"state\.url: backend \"redis\" needs the Redis URL"),
        ('[state]\nbackend = "disk"\n', r"state\.backend: must be one of 'memory', 'redis'"),
        ('[state]\nurl = "http://u:pw@r"\n', r"state\.url: must be a redis://"),
        ("[state]\nmax_bytes = 0\n", r"state\.max_bytes: must be a positive integer"),
        ("[state]\ntimeout = 0\n", r"state\.timeout: must be a positive number"),
        (
            '[state]\nforward_unknown_upstream_ids = "yes"\n',
            r"state\.forward_unknown_upstream_ids: expected a boolean",
        ),
    ],
)
def test_state_mistakes_name_the_key(tmp_path: Path, text: str, named: str) -> None:
    text += '[upstream]\nbase_url = "http://u/v1"\n'
    with pytest.raises(ConfigError, match=named) as raised:
        load_config(write(tmp_path, text))
    assert "pw" not in str(raised.value)  # a URL's password is never quoted


def test_more_open_items_than_max_event_bytes_holds_is_warned_about() -> None:
    """Issue 38, item 8: a raised max_open_items is judged by max_event_bytes first on a
    translated stream; start-up says so, with the value that holds them."""
    from proxai.config_file import server_warnings

    up = {"upstream": {"base_url": "http://up.test/v1"}}
    many = {**up, "server": {"max_open_items": 40_000}}
    (warning,) = server_warnings(load_config(None, overrides=many))
    assert "max_open_items = 40000" in warning and "at most 8192 items" in warning
    assert "max_event_bytes = 81920000 holds that many" in warning
    assert server_warnings(load_config(None, overrides=up)) == []  # 1024 of 8192
    room = {**up, "server": {"max_open_items": 40_000, "max_event_bytes": 81_920_000}}
    assert server_warnings(load_config(None, overrides=room)) == []


def test_an_in_process_state_store_under_several_workers_is_warned_about() -> None:
    from proxai.config_file import state_warnings

    up = {"upstream": {"base_url": "http://up.test/v1"}}
    (warning,) = state_warnings(load_config(None, overrides={**up, "server": {"workers": 4}}))
    assert "4 workers" in warning and 'backend = "redis"' in warning
    assert state_warnings(load_config(None, overrides={**up, "server": {"workers": 1}})) == []
    redis = {"backend": "redis", "url": "redis://h:1/0"}
    shared = {**up, "server": {"workers": 4}, "state": redis}
    assert state_warnings(load_config(None, overrides=shared)) == []


def test_the_fleets_old_concurrency_key_names_the_new_one(tmp_path: Path) -> None:
    """``[limits] max_concurrent_streams`` read as every key's default beside a key
    entry's own; it is now ``fleet_max_concurrent_streams`` and the old key says so."""
    path = tmp_path / "proxai.toml"
    path.write_text(
        '[upstream]\nbase_url = "http://127.0.0.1:1/v1"\n[limits]\nmax_concurrent_streams = 3\n'
    )
    with pytest.raises(ConfigError, match=r"now limits\.fleet_max_concurrent_streams"):
        load_config(path)
    renamed = {"upstream": {"base_url": "http://127.0.0.1:1/v1"}}
    config = load_config(None, overrides={**renamed, "limits": {"fleet_max_concurrent_streams": 3}})
    assert config.limits.fleet_max_concurrent_streams == 3 and config.limits.enabled
