"""Real coding agents through proxai: Codex and Claude Code, over HTTP and over the
Responses WebSocket.

Codex (``@openai/codex``) speaks only the Responses API and Claude Code
(``@anthropic-ai/claude-code``) only Anthropic Messages. Each scenario starts a
:class:`ScriptedUpstream`, a real proxai in front of it, and then the real CLI,
offline (a temporary ``HOME``, proxai's URL as its only server, telemetry and
updates off), bounded by a hard timeout. The model calls the client's shell tool to
run ``echo proxai-ok``, then answers in text. The upstream speaks only Chat
Completions (``chat_upstream.ChatModel``, ``upstream.protocol = "openai_chat"``), or,
for Codex's built-in provider over the socket, the Responses API
(``responses_upstream.ResponsesModel``, ``openai_responses``). Over the socket Codex
opens ``GET /v1/responses`` upgraded; proxai relays each of its turns as a POST and
keeps the socket's conversation. A tap on proxai's client sockets
(:class:`FrameTap`) records every frame each way.

Checks, per scenario:

- the client's exit status and what it printed (the final answer, or its error);
- that the client ran the command: its output is the tool result in the upstream's
  last request, next to the call's reasoning (streamed as DeepSeek's
  ``reasoning_content``, carried through the client and back);
- proxai's outcome kind and ``translation`` for every request, and whether each
  reached the upstream streaming or not;
- for remote compaction (a provider named "OpenAI", a tiny auto-compact limit): the
  summarizing request proxai sent for Codex's ``compaction_trigger``, and the summary
  its compaction item became in the request after it;
- for a stall: that proxai's ``tool_arguments`` deadline ended it (the client's own
  stall detection waits 120 s or more) and that the client then retried promptly,
  or gave up with proxai's message;
- over the socket: every API request was a socket turn (no HTTP fallback), each
  socket's upgrade record (GET, 101), no "Reconnecting" in what Codex printed, Codex's
  warm-up (``generate: false``) answered by proxai and its input (Codex's base
  instructions) in the first upstream request, and after a stall the ``error`` and
  ``response.failed`` frames as the stalled turn's last frames.

Negative controls run the same stall with proxai's deadlines out of reach: each
client must still be waiting when its (short) hard timeout ends it, or the stall
scenarios would prove nothing about proxai.

Run with ``make test-clients`` (it installs the npm packages first). Exits non-zero
if any check failed; the last line is ``N passed, M failed``. ``-v`` also prints
what each client printed and proxai's outcome records. Names as arguments run only
those scenarios.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import trio
from chat_upstream import ChatModel, ToolCall, reasoning_sent_with, tool_messages
from responses_upstream import RETRY_AFTER, ResponsesModel, function_outputs

from proxai.config import DEFAULT_COMPACTION_PROMPT, DEFAULT_SUMMARY_PREFIX
from proxai.errors import ProxyError
from proxai.outcome import Outcome, OutcomeKind
from proxai.service.plan import Incoming
from proxai.service.socket_endpoint import SocketEndpoint
from proxai.service.socket_io import ClientSocket
from proxai.testing import RecordedRequest, ScriptedUpstream, open_proxai
from proxai.testing.server import RunningProxai

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"

COMMAND = "echo proxai-ok"
COMMAND_OUTPUT = "proxai-ok"
ANSWER = "The command ran and printed proxai-ok."
PROMPT = f"Run the shell command `{COMMAND}` and tell me what it printed."
#: DeepSeek-style reasoning before the call: it must come back on the next turn.
REASONING = "The user wants the command's output: run it first."

#: proxai's deadlines: tool_arguments well below idle, so the outcome says which fired.
TIMEOUTS = {"first_byte": 5.0, "tool_arguments": 0.5, "idle": 5.0, "total": 60.0}
#: The deadlines of the negative controls: out of reach of their hard timeout.
UNCUT = {"first_byte": 5.0, "tool_arguments": 600.0, "idle": 600.0, "total": 900.0}
#: Each client run's hard limit; both clients' own stall detection waits longer.
PROCESS_TIMEOUT = 60.0
CONTROL_TIMEOUT = 5.0
#: Codex's own SSE idle timeout (its default is 300 s; Claude Code's is 300 s at least).
CODEX_IDLE_MS = 120_000
#: The summary the Chat model writes when proxai asks it to compact.
SUMMARY = "Summary: the user asked to run `echo proxai-ok`; it ran and printed proxai-ok."
#: Codex's auto-compact limit in the compaction scenario: below one turn's usage.
COMPACT_LIMIT = 100
#: How late a deadline may fire, and how soon the client must be back after it.
DEADLINE_SLACK = 1.0
RETRY_WITHIN = 10.0


@attrs.frozen
class Agent:
    """One CLI: how to find it, which tool the model calls, which pair proxai translates."""

    name: str
    call: ToolCall
    translation: str
    path: str  # proxai's path for its requests

    def binary(self) -> Path:
        """The native binary (its platform package), else the npm wrapper in ``.bin``.

        The platform package needs no postinstall script, and a timeout kills the
        client itself rather than a node wrapper.
        """
        arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(
            platform.machine().lower(), platform.machine()
        )
        triple = {"x64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
        native = {
            "codex": NODE_MODULES
            / f"@openai/codex-linux-{arch}/vendor/{triple}-unknown-linux-musl/bin/codex",
            "claude": NODE_MODULES / f"@anthropic-ai/claude-code-linux-{arch}/claude",
        }[self.name]
        if sys.platform == "linux" and native.is_file():
            return native
        return NODE_MODULES / ".bin" / self.name


CODEX = Agent(
    "codex",
    ToolCall("call_proxai_1", "exec_command", {"cmd": COMMAND}),
    "responses→chat",
    "/v1/responses",
)
CLAUDE = Agent(
    "claude",
    ToolCall("call_proxai_1", "Bash", {"command": COMMAND, "description": "Print proxai-ok"}),
    "messages→chat",
    "/v1/messages",
)


#: A socket's ``generate: false`` turn, answered by proxai itself (no upstream request).
WARM_UP = "warm-up"


@attrs.frozen
class Scenario:
    """One run of a CLI through proxai against the scripted model."""

    name: str
    agent: Agent
    #: proxai's outcome kind for each of the client's API requests (a socket's
    #: turns), in order; :data:`WARM_UP` for a warm-up proxai answered.
    outcomes: Sequence[OutcomeKind | str]
    #: How each upstream request was made: "stream" or "whole".
    modes: Sequence[str]
    stalls: int = 0  # how many streamed tool-call turns stall mid-arguments
    #: The model reasons (DeepSeek's ``reasoning_content``) before its call.
    reasoning: bool = True
    #: The client must end with an error carrying proxai's message, not the answer.
    gives_up: bool = False
    codex_config: Mapping[str, object] = attrs.field(factory=dict)
    #: A negative control: deadlines out of reach, the client must still be waiting.
    control: bool = False
    #: What the upstream speaks: "chat" (Chat Completions) or "responses".
    upstream: str = "chat"
    #: Codex's provider: "custom" (``model_providers.proxai``) or "builtin" (the
    #: ``openai`` provider with ``openai_base_url``, which uses the socket).
    provider: str = "custom"
    #: How many client sockets Codex opens; 0: it uses HTTP only.
    sockets: int = 0
    #: How many requests Codex sends over HTTP once it has given up on the socket.
    http_fallback: int = 0
    #: The Responses upstream answers its first request 429 with ``retry-after``.
    rate_limited: bool = False
    #: A negative control for the socket checks: proxai answers every upgrade with an
    #: HTTP 500, as it did before it served the mode; the checks must catch Codex's
    #: reconnects and its fallback to HTTP.
    broken_upgrade: bool = False
    #: Codex's provider is named "OpenAI" with a tiny auto-compact limit: after the
    #: tool call it asks proxai to compact (remote compaction), and the loop goes on
    #: from the summary proxai had the Chat upstream write.
    compaction: bool = False

    @property
    def translation(self) -> str | None:
        return None if self.upstream == "responses" else self.agent.translation

    @property
    def websocket(self) -> bool:
        return self.sockets > 0


STALLED = OutcomeKind.STALLED_TOOL_ARGUMENTS
DONE = OutcomeKind.COMPLETED
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("codex-tool-loop", CODEX, [DONE, DONE], ["stream", "stream"]),
    # Codex reads response.failed and reconnects: the same request again, streaming.
    Scenario(
        "codex-stall-then-retry",
        CODEX,
        [STALLED, DONE, DONE],
        ["stream", "stream", "stream"],
        stalls=1,
    ),
    # No reconnects left: Codex must end the turn with proxai's message.
    Scenario(
        "codex-stall-gives-up",
        CODEX,
        [STALLED],
        ["stream"],
        stalls=99,
        gives_up=True,
        codex_config={"stream_max_retries": 0},
    ),
    # Codex's built-in provider with openai_base_url: the socket first, a warm-up, then
    # the loop's two turns, each a POST to the Responses upstream.
    Scenario(
        "codex-ws-builtin-tool-loop",
        CODEX,
        [WARM_UP, DONE, DONE],
        ["stream", "stream"],
        upstream="responses",
        provider="builtin",
        sockets=1,
    ),
    # A custom provider with supports_websockets = true, on the Chat upstream: proxai
    # holds the socket's conversation and translates each turn.
    Scenario(
        "codex-ws-custom-chat-tool-loop",
        CODEX,
        [WARM_UP, DONE, DONE],
        ["stream", "stream"],
        codex_config={"supports_websockets": True},
        sockets=1,
    ),
    # A stall over the socket: Codex reads error and response.failed, opens a new
    # socket and sends the whole context again without previous_response_id.
    Scenario(
        "codex-ws-stall-then-new-socket",
        CODEX,
        [WARM_UP, STALLED, DONE, DONE],
        ["stream", "stream", "stream"],
        stalls=1,
        upstream="responses",
        provider="builtin",
        sockets=2,
    ),
    # A 429 before the first event: proxai's error frame (status 429, retry-after at the
    # top level); Codex waits retry-after, then opens a new socket with the whole context.
    Scenario(
        "codex-ws-429-then-new-socket",
        CODEX,
        [WARM_UP, OutcomeKind.UPSTREAM_ERROR, DONE, DONE],
        ["stream", "stream", "stream"],
        upstream="responses",
        provider="builtin",
        sockets=2,
        rate_limited=True,
    ),
    # No retries left (a custom provider): Codex falls back to HTTP ("Falling back from
    # WebSockets to HTTPS transport") for one more try, then ends the turn with
    # proxai's message.
    Scenario(
        "codex-ws-stall-gives-up",
        CODEX,
        [WARM_UP, STALLED, STALLED],
        ["stream", "stream"],
        stalls=99,
        gives_up=True,
        codex_config={"supports_websockets": True, "stream_max_retries": 0},
        sockets=1,
        http_fallback=1,
    ),
    # Remote compaction over the Chat upstream: the tool call, proxai's summarizing
    # request (its compaction answered from the summary), then the answer from a
    # history that holds only the summary of the call and its output.
    Scenario(
        "codex-remote-compaction-chat",
        CODEX,
        [DONE, DONE, DONE],
        ["stream", "stream", "stream"],
        compaction=True,
    ),
    # The same over the socket, with the built-in provider (named "OpenAI" itself), as
    # most users point Codex at a gateway: the compaction is one more socket turn.
    Scenario(
        "codex-ws-builtin-remote-compaction-chat",
        CODEX,
        [WARM_UP, DONE, DONE, DONE],
        ["stream", "stream", "stream"],
        provider="builtin",
        sockets=1,
        compaction=True,
    ),
    Scenario("claude-tool-loop", CLAUDE, [DONE, DONE], ["stream", "stream"]),
    # Claude Code reads event: error and, as no content block had completed yet, sends
    # the same request without stream.
    Scenario(
        "claude-stall-then-whole",
        CLAUDE,
        [STALLED, DONE, DONE],
        ["stream", "whole", "stream"],
        stalls=1,
        reasoning=False,
    ),
    # A thinking block had completed before the stall: Claude Code does not fall back
    # (it would repeat what it showed) and must end the turn with proxai's message.
    Scenario(
        "claude-stall-after-thinking",
        CLAUDE,
        [STALLED],
        ["stream"],
        stalls=99,
        gives_up=True,
    ),
    Scenario("control-codex-stall-uncut", CODEX, [], [], stalls=99, control=True),
    Scenario(
        "control-codex-ws-stall-uncut",
        CODEX,
        [],
        [],
        stalls=99,
        control=True,
        upstream="responses",
        provider="builtin",
        sockets=1,
    ),
    Scenario(
        "control-codex-ws-upgrade-500",
        CODEX,
        [WARM_UP, DONE, DONE],
        ["stream", "stream"],
        upstream="responses",
        provider="builtin",
        sockets=1,
        broken_upgrade=True,
    ),
    Scenario("control-claude-stall-uncut", CLAUDE, [], [], stalls=99, control=True),
)


@attrs.define
class Run:
    """The client process's result (``code`` is None when the hard timeout ended it)."""

    code: int | None
    stdout: str
    stderr: str
    seconds: float


@attrs.define
class SocketLog:
    """One client socket proxai accepted: every frame each way, with its time."""

    accepted_at: float
    #: (time, text) of each text frame the client sent, and of each proxai sent.
    frames_in: list[tuple[float, str]] = attrs.field(factory=list)
    frames_out: list[tuple[float, str]] = attrs.field(factory=list)

    def client_frames(self) -> list[dict[str, Any]]:
        return [f for _, f in _objects(self.frames_in)]

    def out_types(self) -> list[str]:
        return [str(f.get("type")) for _, f in _objects(self.frames_out)]


def _objects(frames: Sequence[tuple[float, str]]) -> list[tuple[float, dict[str, Any]]]:
    found = []
    for at, text in frames:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append((at, value))
    return found


class FrameTap:
    """Records the frames of every client socket the runner's proxai (in this process)
    accepts: ``ClientSocket``'s ``accept``, ``receive`` and ``send_text`` wrapped while
    :meth:`installed`. proxai's captures do not cover socket turns."""

    def __init__(self) -> None:
        self.sockets: list[SocketLog] = []
        self._logs: dict[ClientSocket, SocketLog] = {}

    @contextmanager
    def installed(self) -> Iterator[FrameTap]:
        names = ("accept", "receive", "send_text")
        original: dict[str, Any] = {name: getattr(ClientSocket, name) for name in names}
        tap = self

        async def accept(sock: ClientSocket, headers: Any = ()) -> None:
            await original["accept"](sock, headers)
            tap._logs[sock] = log = SocketLog(trio.current_time())
            tap.sockets.append(log)

        async def receive(sock: ClientSocket) -> Any:
            frame = await original["receive"](sock)
            log = tap._logs.get(sock)
            if log is not None and isinstance(frame, str):
                log.frames_in.append((trio.current_time(), frame))
            return frame

        async def send_text(sock: ClientSocket, data: bytes) -> None:
            sent = sock.frames_out
            await original["send_text"](sock, data)
            log = tap._logs.get(sock)
            if log is not None and sock.frames_out > sent:  # not dropped: the socket was open
                log.frames_out.append((trio.current_time(), data.decode(errors="replace")))

        for name, method in (("accept", accept), ("receive", receive), ("send_text", send_text)):
            setattr(ClientSocket, name, method)
        try:
            yield self
        finally:
            for name, method in original.items():
                setattr(ClientSocket, name, method)

    def creates(self) -> int:
        """How many ``response.create`` frames the client sent, on all its sockets."""
        return sum(
            f.get("type") == "response.create" for log in self.sockets for f in log.client_frames()
        )


def base_env(home: str) -> dict[str, str]:
    """Nothing from the caller's environment but PATH and the locale: no API keys,
    no proxy settings, no config of a real installation."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
    return {**keep, "HOME": home, "TERM": "dumb", "NO_COLOR": "1"}


def toml_value(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value).lower()


def codex_setup(scenario: Scenario, proxai_url: str, home: str) -> tuple[list[str], dict[str, str]]:
    """``codex exec`` pointed at proxai; no DNS lookup, no prompt.

    A custom provider ``proxai`` (``wire_api = "responses"``, HTTP unless the scenario
    sets ``supports_websockets``), or the built-in ``openai`` provider with
    ``openai_base_url`` and its key in ``CODEX_API_KEY``, as most users point Codex at a
    gateway (it opens the socket first; its retries and timeouts cannot be changed).
    """
    codex_home = Path(home, ".codex")
    codex_home.mkdir()
    common = [
        'model = "gpt-5.5"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
    ]
    tables = [
        # Otherwise Codex looks up ab.chatgpt.com, chatgpt.com and api.github.com.
        "[analytics]",
        "enabled = false",
        "[features]",
        "plugins = false",
    ]
    if scenario.compaction:
        common.append(f"model_auto_compact_token_limit = {COMPACT_LIMIT}")
    env = {**base_env(home), "CODEX_HOME": str(codex_home)}
    if scenario.provider == "builtin":
        config = [*common, f'openai_base_url = "{proxai_url}/v1"', *tables]
        env["CODEX_API_KEY"] = "sk-client"
    else:
        provider: dict[str, object] = {
            # Codex compacts remotely only through a provider named "OpenAI".
            "name": "OpenAI" if scenario.compaction else "proxai",
            "base_url": f"{proxai_url}/v1",
            "wire_api": "responses",
            "env_key": "PROXAI_CLIENT_KEY",
            "request_max_retries": 2,
            "stream_max_retries": 2,
            "stream_idle_timeout_ms": CODEX_IDLE_MS,
            **scenario.codex_config,
        }
        config = [
            *common,
            'model_provider = "proxai"',
            *tables,
            "[model_providers.proxai]",
            *(f"{key} = {toml_value(value)}" for key, value in provider.items()),
        ]
        env["PROXAI_CLIENT_KEY"] = "sk-client"
    (codex_home / "config.toml").write_text("\n".join(config) + "\n")
    argv = [
        str(CODEX.binary()),
        "exec",
        "--skip-git-repo-check",
        "--json",
        "--color",
        "never",
        PROMPT,
    ]
    return argv, env


def claude_setup(
    scenario: Scenario, proxai_url: str, home: str
) -> tuple[list[str], dict[str, str]]:
    """``claude -p`` with proxai as its Anthropic base URL (no ``/v1``: the SDK adds it)."""
    env = {
        **base_env(home),
        "ANTHROPIC_BASE_URL": proxai_url,
        "ANTHROPIC_API_KEY": "sk-ant-client",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "2",
    }
    # "--allowedTools=Bash" with "=": the option takes several values and would
    # swallow the prompt. The bypass-permissions modes refuse to run as root.
    argv = [str(CLAUDE.binary()), "-p", "--output-format", "json", "--allowedTools=Bash", PROMPT]
    return argv, env


async def run_client(argv: list[str], env: dict[str, str], cwd: str, limit: float) -> Run:
    """Run the CLI with stdin closed (Codex would read it into the prompt), killed after
    ``limit`` seconds."""
    started = trio.current_time()
    done = None
    with trio.move_on_after(limit):
        done = await trio.run_process(
            argv,
            env=env,
            cwd=cwd,
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    seconds = trio.current_time() - started
    if done is None:
        return Run(None, "", "", seconds)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    return Run(done.returncode, out, err, seconds)


def codex_result(run: Run) -> tuple[str | None, str | None, list[str]]:
    """From ``codex exec --json``: the final message, the turn's error, the commands' output."""
    events = []
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    items = [e["item"] for e in events if e.get("type") == "item.completed" and "item" in e]
    messages = [i.get("text") for i in items if i.get("type") == "agent_message"]
    outputs = [
        str(i.get("aggregated_output")) for i in items if i.get("type") == "command_execution"
    ]
    failed = [e for e in events if e.get("type") in ("turn.failed", "error")]
    error = None
    if failed:
        error = str((failed[-1].get("error") or {}).get("message") or failed[-1].get("message"))
    completed = any(e.get("type") == "turn.completed" for e in events)
    answer = messages[-1] if messages and completed else None
    return answer, error, outputs


def claude_result(run: Run) -> tuple[str | None, str | None, list[str]]:
    """From ``claude -p --output-format json``: the final answer or the error text."""
    try:
        result = json.loads(run.stdout)
    except ValueError:
        return None, None, []
    if not isinstance(result, dict):
        return None, None, []
    text = result.get("result")
    text = text if isinstance(text, str) else None
    if result.get("is_error"):
        return None, text, []
    if result.get("num_turns") != 2:
        return None, f"{result.get('num_turns')} turns, expected 2: {text}", []
    return text, None, []


RESULTS: dict[str, Callable[[Run], tuple[str | None, str | None, list[str]]]] = {
    "codex": codex_result,
    "claude": claude_result,
}


def check_client(scenario: Scenario, run: Run, detail: str | None) -> list[str]:
    """What the client printed and how it exited."""
    failures: list[str] = []
    answer, error, outputs = RESULTS[scenario.agent.name](run)
    if scenario.gives_up:
        if run.code != 1:
            failures.append(f"the client exited {run.code}, expected 1 (an error)")
        if detail is None or error is None or detail not in error:
            failures.append(f"the client's error {error!r} does not carry proxai's {detail!r}")
        return failures
    if run.code != 0:
        failures.append(f"the client exited {run.code}; its error: {error!r}")
    if answer != ANSWER:
        failures.append(f"the client's answer is {answer!r}, expected {ANSWER!r}")
    if scenario.agent is CODEX and not any(COMMAND_OUTPUT in o for o in outputs):
        failures.append(f"codex reported no command that printed {COMMAND_OUTPUT}: {outputs}")
    return failures


def check_released(requests: Sequence[RecordedRequest]) -> list[str]:
    """Every upstream response the client did not get to its end (a stall, a client
    that left) had its connection closed by proxai by the time the client ended
    (issue 38: a socket turn's stall must release its upstream as an HTTP one does)."""
    return [
        f"upstream request {n} ({'stream' if r.json().get('stream') else 'whole'}) was "
        "left open: its response never ended and proxai never closed the connection"
        for n, r in enumerate(requests)
        if r.response_done_at is None and r.closed_at is None
    ]


def check_upstream(scenario: Scenario, requests: Sequence[RecordedRequest]) -> list[str]:
    """What reached the Chat upstream: the modes, the command's output as a tool result
    and the reasoning sent back with the call."""
    failures: list[str] = []
    bodies = [r.json() for r in requests]
    modes = ["stream" if b.get("stream") is True else "whole" for b in bodies]
    if modes != list(scenario.modes):
        failures.append(f"upstream requests {modes}, expected {list(scenario.modes)}")
    if scenario.gives_up or not bodies:
        return failures
    call_id = scenario.agent.call.id
    if scenario.upstream == "responses":
        return failures + check_responses_upstream(scenario, bodies[-1])
    if scenario.compaction:
        return failures + check_compaction(bodies)
    results = tool_messages(bodies[-1])
    if not any(i == call_id and COMMAND_OUTPUT in text for i, text in results):
        failures.append(
            f"the last upstream request has no tool result for {call_id} holding "
            f"{COMMAND_OUTPUT!r}: {results}"
        )
    # The stateless round trip: Codex's reasoning item (encrypted_content), Claude
    # Code's thinking block (signature) carried the reasoning back. Codex keeps the
    # reasoning item of an attempt that failed and sends it again with the retry's, so
    # there it comes back twice, joined.
    reasoning = reasoning_sent_with(bodies[-1], call_id)
    want = [REASONING * (1 + scenario.stalls if scenario.agent is CODEX else 1)]
    if reasoning != (want if scenario.reasoning else [None]):
        failures.append(f"the call's reasoning came back as {reasoning}, expected {want}")
    return failures


def check_compaction(bodies: Sequence[dict[str, Any]]) -> list[str]:
    """The Chat upstream's three requests: the call; proxai's summarizing request (the
    call's output in it, tools declared but ``tool_choice: "none"``, proxai's prompt
    last); then the turn after the compaction, whose history is the summary proxai
    unpacked from its compaction item in place of the call and its output."""
    if len(bodies) != 3:
        return [f"{len(bodies)} upstream requests, expected 3 (call, summary, answer)"]
    failures: list[str] = []
    summarizing, after = bodies[1], bodies[2]
    last = (summarizing.get("messages") or [{}])[-1]
    if summarizing.get("tool_choice") != "none" or not summarizing.get("tools"):
        failures.append("the summarizing request does not declare tools with tool_choice none")
    if last.get("role") != "user" or last.get("content") != DEFAULT_COMPACTION_PROMPT:
        failures.append(f"the summarizing request does not end with proxai's prompt: {last}")
    if not any(COMMAND_OUTPUT in text for _, text in tool_messages(summarizing)):
        failures.append("the summarizing request lacks the command's output")
    expanded = f"{DEFAULT_SUMMARY_PREFIX}\n\n{SUMMARY}"
    users = [m.get("content") for m in after.get("messages") or [] if m.get("role") == "user"]
    if expanded not in users:
        failures.append(f"the request after the compaction lacks its summary: {users}")
    if tool_messages(after):
        failures.append("the request after the compaction still holds the tool result")
    return failures


def check_responses_upstream(scenario: Scenario, last: dict[str, Any]) -> list[str]:
    """The Responses upstream's last request: self-contained (proxai expanded the
    socket's ``previous_response_id``), with the call's output and its reasoning item."""
    failures: list[str] = []
    call_id = scenario.agent.call.id
    if "previous_response_id" in last:
        failures.append(f"the last upstream request names {last['previous_response_id']!r}")
    results = function_outputs(last)
    if not any(i == call_id and COMMAND_OUTPUT in text for i, text in results):
        failures.append(
            f"the last upstream request has no function_call_output for {call_id} "
            f"holding {COMMAND_OUTPUT!r}: {results}"
        )
    items = [i for i in last.get("input") or [] if isinstance(i, dict)]
    calls = [i for i in items if i.get("type") == "function_call" and i.get("call_id") == call_id]
    if len(calls) != 1:
        failures.append(f"the last upstream request holds {len(calls)} calls {call_id}, not 1")
    # As over HTTP, Codex keeps the reasoning item of an attempt that failed.
    reasoning = [i.get("encrypted_content") for i in items if i.get("type") == "reasoning"]
    want = [f"enc:{REASONING}"] * (1 + scenario.stalls)
    if reasoning != want:
        failures.append(f"the reasoning items came back as {reasoning}, expected {want}")
    return failures


def label(outcome: Outcome) -> str:
    """An outcome's kind, or :data:`WARM_UP` for a socket turn proxai answered itself."""
    answered = outcome.transport == "websocket" and not outcome.attempts
    if answered and outcome.kind is DONE and "warm-up" in (outcome.detail or ""):
        return WARM_UP
    return outcome.kind.value if outcome.kind else "none"


def check_outcomes(
    scenario: Scenario, outcomes: Sequence[Outcome], requests: Sequence[RecordedRequest]
) -> list[str]:
    """proxai's records: kinds, the pair translated, and when the stall was cut."""
    failures: list[str] = []
    got = [label(o) for o in outcomes]
    want = [k if isinstance(k, str) else k.value for k in scenario.outcomes]
    if got != want:
        failures.append(f"proxai outcomes {got}, expected {want}")
    # The requests that reached the upstream, in the order of its requests.
    relayed = [o for o in outcomes if label(o) != WARM_UP]
    wrong = {o.translation for o in relayed} - {scenario.translation}
    if wrong:
        failures.append(f"translation {wrong}, expected {scenario.translation}")
    stalled = [i for i, o in enumerate(relayed) if o.kind is STALLED]
    if stalled:
        took = relayed[stalled[0]].total_s or 0.0
        deadline = TIMEOUTS["tool_arguments"]
        if not deadline <= took <= deadline + DEADLINE_SLACK:
            failures.append(f"proxai cut the stall after {took:.2f} s, not at {deadline} s")
        at = stalled[0]
        if at + 1 < len(requests):
            gap = requests[at + 1].received_at - requests[at].received_at
            if gap > RETRY_WITHIN:
                failures.append(f"the client came back {gap:.1f} s after the stalled request")
    return failures


def _strings(value: object) -> Iterator[str]:
    """Every string in a parsed JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _texts(items: object) -> list[str]:
    """The ``input_text`` texts of a frame's input items."""
    found: list[str] = []
    for item in items if isinstance(items, list) else []:
        for part in item.get("content") or [] if isinstance(item, dict) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                found.append(part["text"])
    return found


def check_sockets(
    scenario: Scenario,
    run: Run,
    tap: FrameTap,
    recorded: Sequence[Outcome],
    requests: Sequence[RecordedRequest],
) -> list[str]:
    """Over the socket: no HTTP fallback, each socket's upgrade record, the warm-up and
    what its input became, and after a stall the frames Codex read and what it did."""
    failures: list[str] = []
    path = scenario.agent.path
    upgrades = [o for o in recorded if o.method == "GET" and o.path == path]
    turns = [o for o in recorded if o.method == "response.create"]
    http = [o for o in recorded if o.path == path and o.transport == "http" and o.method != "GET"]
    if len(tap.sockets) != scenario.sockets:
        failures.append(f"codex opened {len(tap.sockets)} sockets, expected {scenario.sockets}")
    shown = [(o.status, o.transport) for o in upgrades]
    if shown != [(101, "websocket")] * scenario.sockets:
        failures.append(f"upgrade records (status, transport) {shown}")
    if {o.transport for o in turns} != {"websocket"}:
        failures.append(f"the turns' transports are {sorted({o.transport for o in turns})}")
    if len(http) != scenario.http_fallback:
        failures.append(
            f"codex sent {len(http)} POST {path} over HTTP, expected {scenario.http_fallback}"
        )
    printed = run.stdout + run.stderr
    # Codex's own retries after a failed turn are its business: a clean loop has none.
    if not scenario.stalls and not scenario.rate_limited and "Reconnecting" in printed:
        failures.append("codex printed 'Reconnecting'")
    if not tap.sockets or not requests:
        return failures
    first = tap.sockets[0].client_frames()
    warm = first[0] if first else {}
    if warm.get("generate") is not False:
        failures.append(f"codex's first frame is not a warm-up: generate={warm.get('generate')!r}")
        return failures
    # proxai kept the warm-up's input (Codex's base instructions, in this frame only)
    # and sent it upstream with the first real turn.
    sent = set(_strings(requests[0].json()))
    texts = _texts(warm.get("input"))
    missing = [t[:60] for t in texts if not any(t in x for x in sent)]
    if not texts or missing:
        failures.append(f"the warm-up's input did not reach the upstream: {missing or 'empty'}")
    turn = _texts(first[1].get("input")) if len(first) > 1 else []
    if any(t in turn for t in texts):
        failures.append("codex's first turn repeats the warm-up's input: the check proves nothing")
    if scenario.stalls:
        failures += check_stall_frames(scenario, tap, texts)
    if scenario.rate_limited:
        failures += check_rate_limit(tap, requests)
    return failures


def check_rate_limit(tap: FrameTap, requests: Sequence[RecordedRequest]) -> list[str]:
    """The 429 as an error frame Codex acted on: it waited ``retry-after`` (read from
    the frame's top-level ``headers``) before it sent the turn again."""
    failures: list[str] = []
    out = _objects(tap.sockets[0].frames_out)
    last = out[-1][1] if out else {}
    headers = last.get("headers") or {}
    if last.get("type") != "error" or last.get("status") != 429:
        failures.append(f"the first socket's last frame is not a 429 error frame: {last}")
    elif headers.get("retry-after") != str(RETRY_AFTER):
        failures.append(f"the error frame's headers are {headers}")
    if len(requests) > 1:
        gap = requests[1].received_at - requests[0].received_at
        if not RETRY_AFTER <= gap <= RETRY_WITHIN:
            failures.append(f"codex sent the turn again {gap:.2f} s after the 429")
    return failures


def check_stall_frames(scenario: Scenario, tap: FrameTap, warm_texts: Sequence[str]) -> list[str]:
    """The stalled turn's last frames, in time; and the new socket Codex opened after it."""
    failures: list[str] = []
    log = tap.sockets[0]
    out = _objects(log.frames_out)
    kinds = [str(f.get("type")) for _, f in out]
    if kinds[-2:] != ["error", "response.failed"]:
        failures.append(f"the stalled turn's last frames are {kinds[-2:]}")
        return failures
    started = log.frames_in[-1][0]  # the stalled turn's response.create
    took = out[-2][0] - started
    deadline = TIMEOUTS["tool_arguments"]
    if not deadline <= took <= deadline + DEADLINE_SLACK:
        failures.append(f"the error frame went {took:.2f} s after the turn's frame")
    if scenario.gives_up:
        return failures
    if len(tap.sockets) < 2:
        return failures
    retry = tap.sockets[1].client_frames()[0]
    if "previous_response_id" in retry or retry.get("generate") is False:
        failures.append("codex's frame on the new socket is not self-contained")
    resent = _texts(retry.get("input"))
    if any(t not in resent for t in warm_texts):
        failures.append("codex's frame on the new socket lacks its base instructions")
    gap = tap.sockets[1].accepted_at - out[-1][0]
    if gap > RETRY_WITHIN:
        failures.append(f"codex opened its new socket {gap:.1f} s after response.failed")
    return failures


SETUPS = {"codex": codex_setup, "claude": claude_setup}


def make_dirs(scratch: str) -> tuple[Path, Path]:
    """The client's empty HOME and working directory (not a git repository)."""
    home, work = Path(scratch, "home"), Path(scratch, "work")
    home.mkdir()
    work.mkdir()
    return home, work


async def settle(proxy: RunningProxai, path: str, count: int, tap: FrameTap | None = None) -> None:
    """Wait (2 s at most) until proxai has recorded ``count`` requests to ``path``, and
    each socket's turns and upgrade: a record is written once all its tasks have ended
    (an upgrade's once its socket has)."""

    def done() -> bool:
        relayed = [o for o in proxy.outcomes if o.path == path and o.attempts]
        if len(relayed) < count:
            return False
        if tap is None:
            return True
        upgrades = sum(o.method == "GET" and o.path == path for o in proxy.outcomes)
        turns = sum(o.method == "response.create" for o in proxy.outcomes)
        return upgrades >= len(tap.sockets) and turns >= tap.creates()

    with trio.move_on_after(2.0):
        while not done():
            await proxy.wait_for_outcomes(len(proxy.outcomes) + 1)


def make_model(scenario: Scenario) -> ChatModel | ResponsesModel:
    if scenario.upstream == "responses":
        return ResponsesModel(
            scenario.agent.call,
            ANSWER,
            REASONING,
            stalls=scenario.stalls,
            rate_limits=int(scenario.rate_limited),
        )
    reasoning = REASONING if scenario.reasoning else None
    summary = SUMMARY if scenario.compaction else None
    return ChatModel(
        scenario.agent.call, ANSWER, reasoning=reasoning, stalls=scenario.stalls, summary=summary
    )


@attrs.frozen
class Result:
    """A scenario's run: its failures, the client run, proxai's outcomes for the
    client's API requests (a socket's turns), its upgrade records, proxai's other
    outcomes as one-line notes, and the sockets' frames."""

    failures: list[str]
    run: Run
    outcomes: list[Outcome]
    upgrades: list[Outcome]
    notes: list[str]
    tap: FrameTap


async def run_scenario(scenario: Scenario) -> Result:
    """Run one scenario."""
    upstream = ScriptedUpstream(make_model(scenario))
    timeouts = UNCUT if scenario.control else TIMEOUTS
    limit = CONTROL_TIMEOUT if scenario.control else PROCESS_TIMEOUT
    protocol = "openai_responses" if scenario.upstream == "responses" else "openai_chat"
    path = scenario.agent.path
    with (
        tempfile.TemporaryDirectory(prefix="proxai-agent-") as scratch,
        FrameTap().installed() as tap,
        upgrade_refused(scenario.broken_upgrade),
    ):
        home, work = make_dirs(scratch)
        async with trio.open_nursery() as nursery:
            await nursery.start(upstream.serve)
            async with open_proxai(
                upstream.base_url,
                upstream={"protocol": protocol},
                timeouts=timeouts,
            ) as proxy:
                argv, env = SETUPS[scenario.agent.name](scenario, proxy.url, str(home))
                run = await run_client(argv, env, str(work), limit)
                await settle(proxy, path, len(upstream.requests), tap)
                recorded = list(proxy.outcomes)
            nursery.cancel_scope.cancel()
    upgrades = [o for o in recorded if o.method == "GET" and o.path == path]
    outcomes = [o for o in recorded if o.path == path and o not in upgrades]
    notes = [
        f"{o.method} {o.path} {o.kind and o.kind.value}"
        for o in recorded
        if o not in outcomes and o not in upgrades
    ]
    result = Result([], run, outcomes, upgrades, notes, tap)
    if scenario.control:
        if run.code is not None:
            result.failures.append(f"the client ended by itself (exit {run.code})")
        return result
    failures = result.failures
    if run.code is None:
        failures.append(f"the client was still running after {limit} s")
    detail = next((o.detail for o in outcomes if o.kind is STALLED), None)
    failures += check_client(scenario, run, detail)
    failures += check_upstream(scenario, upstream.requests)
    failures += check_released(upstream.requests)
    failures += check_outcomes(scenario, outcomes, upstream.requests)
    if scenario.broken_upgrade:
        # The client gets its answer over HTTP in the end: only the socket checks fail.
        found = check_sockets(scenario, run, tap, recorded, upstream.requests)
        caught = [f for f in found if "Reconnecting" in f or "over HTTP" in f]
        failures.clear()
        if len(caught) < 2:
            failures.append(f"the socket checks missed the reconnects and fallback: {found}")
        return result
    if scenario.websocket:
        failures += check_sockets(scenario, run, tap, recorded, upstream.requests)
    elif tap.sockets:
        failures.append(f"the client opened {len(tap.sockets)} sockets over HTTP")
    return result


@contextmanager
def upgrade_refused(refuse: bool) -> Iterator[None]:
    """While active (``refuse``), proxai answers every upgrade with an HTTP 500."""
    if not refuse:
        yield
        return
    check = SocketEndpoint._check_upgrade

    def refused(self: SocketEndpoint, scope: dict[str, Any], incoming: Incoming) -> None:
        raise ProxyError(500, "upgrade refused (negative control)", "server_error")

    SocketEndpoint._check_upgrade = refused  # type: ignore[method-assign]
    try:
        yield
    finally:
        SocketEndpoint._check_upgrade = check  # type: ignore[method-assign]


async def version(binary: str) -> str | None:
    """The CLI's version (from ``--version``), or None when it is missing or does not start."""
    try:
        with trio.move_on_after(30):
            done = await trio.run_process(
                [binary, "--version"], capture_stdout=True, capture_stderr=True, check=False
            )
            found = re.search(r"\d+\.\d+\.\d+\S*", done.stdout.decode(errors="replace"))
            if done.returncode == 0 and found:
                return found[0]
    except OSError:
        pass
    return None


def describe(scenario: Scenario, run: Run) -> str:
    """What the client ended with, in one line."""
    if run.code is None:
        return "still waiting: ended by the hard timeout"
    answer, error, _ = RESULTS[scenario.agent.name](run)
    if answer is not None:
        return f"exit {run.code}, answered {answer!r}"
    return f"exit {run.code}, error {error!r}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def socket_lines(result: Result) -> list[str]:
    """Each socket's frames (what Codex sent, how many proxai sent) and each turn's times."""
    lines: list[str] = []
    # proxai's answers to warm-ups: completed at once, with no output and no tokens.
    warm_ids = {
        str(frame["response"].get("id"))
        for log in result.tap.sockets
        for _, frame in _objects(log.frames_out)
        if frame.get("type") == "response.completed"
        and isinstance(frame.get("response"), dict)
        and frame["response"].get("output") == []
        and (frame["response"].get("usage") or {}).get("total_tokens") == 0
    }
    for n, log in enumerate(result.tap.sockets, 1):
        upgrade = result.upgrades[n - 1] if n <= len(result.upgrades) else None
        ended = f"{upgrade.status}, {upgrade.detail}" if upgrade else "no record"
        sent: list[str] = []
        for (_, text), frame in zip(log.frames_in, log.client_frames(), strict=False):
            items = frame.get("input")
            count = len(items) if isinstance(items, list) else 0
            if frame.get("generate") is False:
                sent.append(f"warm-up {len(text)} B/{count} items")
                continue
            prev = frame.get("previous_response_id")
            prev = "the warm-up" if prev in warm_ids else prev or "none"
            sent.append(f"{frame.get('type')} {len(text)} B/{count} items prev={prev}")
        lines.append(f"socket {n} ({ended}): client sent {'; '.join(sent) or 'nothing'}")
        lines.append(f"  proxai sent {len(log.frames_out)} frames, ending {log.out_types()[-2:]}")
    turns = []
    for o in result.outcomes:
        if label(o) == WARM_UP:
            turns.append(f"warm-up {_seconds(o.total_s)} s")
        else:
            turns.append(
                f"{label(o)} first event {_seconds(o.first_event_s)} s, "
                f"total {_seconds(o.total_s)} s, {o.events} events"
            )
    lines.append("turns: " + "; ".join(turns))
    return lines


async def main(argv: Sequence[str]) -> int:
    verbose = "-v" in argv
    # The outcome records are checked here (and printed with -v), not logged.
    logging.getLogger("proxai.request").addHandler(logging.NullHandler())
    names = [a for a in argv if not a.startswith("-")]
    chosen = [s for s in SCENARIOS if not names or s.name in names]
    passed = failed = 0
    ran: list[str] = []
    for agent, title in ((CODEX, "Codex"), (CLAUDE, "Claude Code")):
        scenarios = [s for s in chosen if s.agent is agent]
        if not scenarios:
            continue
        binary = agent.binary()
        found = await version(str(binary))
        if found is None:
            print(f"{title}: NOT RUN, {binary} is missing or does not start")
            print(f"  (run `npm ci` in {HERE}, or `make test-clients`)")
            failed += len(scenarios)
            continue
        ran.append(f"{title} {found} ({len(scenarios)} scenarios)")
        print(f"{title} {found} through proxai (timeouts {TIMEOUTS})")
        for scenario in scenarios:
            result = await run_scenario(scenario)
            run, failures = result.run, result.failures
            kinds = ", ".join(label(o) for o in result.outcomes) or "none"
            status = "FAIL" if failures else "PASS"
            print(f"  {status} {scenario.name:<30} {run.seconds:5.1f} s  proxai={kinds}")
            print(f"       client: {describe(scenario, run)}")
            if scenario.broken_upgrade:
                refused = sum(o.status == 500 for o in result.upgrades)
                again = (run.stdout + run.stderr).count("Reconnecting")
                http = sum(o.transport == "http" for o in result.outcomes)
                print(
                    f"       {refused} upgrades answered 500, 'Reconnecting' ×{again}, "
                    f"then {http} POST over HTTP: caught by the socket checks"
                )
            elif scenario.websocket:
                for line in socket_lines(result):
                    print(f"       {line}")
            if verbose:
                for o in result.outcomes:
                    dropped = ",".join(o.dropped) or "-"
                    print(
                        f"       outcome {label(o)} {o.transport} {o.translation} dropped={dropped}"
                    )
                    if o.detail:
                        print(f"         detail: {o.detail}")
                for note in result.notes:
                    print(f"       also: {note}")
                for n, log in enumerate(result.tap.sockets, 1):
                    if log.out_types()[-2:] == ["error", "response.failed"]:
                        for _, text in log.frames_out[-2:]:
                            print(f"       socket {n} ended its turn with {text[:400]}")
            if failures:
                failed += 1
                for failure in failures:
                    print(f"      - {failure}")
                print(f"      stdout: {run.stdout.strip()[-1500:]}")
                print(f"      stderr: {run.stderr.strip()[-1500:]}")
            else:
                passed += 1
    print(f"Ran: {'; '.join(ran) or 'no agent CLI'}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1:]))
