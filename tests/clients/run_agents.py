"""Real coding agents through proxai's translation: Codex and Claude Code on a Chat upstream.

Codex (``@openai/codex``) speaks only the Responses API and Claude Code
(``@anthropic-ai/claude-code``) only Anthropic Messages. Each scenario starts a
:class:`ScriptedUpstream` that speaks only Chat Completions (``chat_upstream.ChatModel``),
a real proxai in front of it with ``upstream.protocol = "openai_chat"``, and then
the real CLI, offline (a temporary ``HOME``, proxai's URL as its only server,
telemetry and updates off), bounded by a hard timeout. The model calls the
client's shell tool to run ``echo proxai-ok``, then answers in text.

Checks, per scenario:

- the client's exit status and what it printed (the final answer, or its error);
- that the client ran the command: its output is the tool result in the upstream's
  last request, next to the call's reasoning (streamed as DeepSeek's
  ``reasoning_content``, carried through the client and back);
- proxai's outcome kind and ``translation`` for every request, and whether each
  reached the upstream streaming or not;
- for a stall: that proxai's ``tool_arguments`` deadline ended it (the client's own
  stall detection waits 120 s or more) and that the client then retried promptly,
  or gave up with proxai's message.

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
import trio
from chat_upstream import ChatModel, ToolCall, reasoning_sent_with, tool_messages

from proxai.outcome import Outcome, OutcomeKind
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


@attrs.frozen
class Scenario:
    """One run of a CLI through proxai against the scripted Chat model."""

    name: str
    agent: Agent
    #: proxai's outcome kind for each of the client's API requests, in order.
    outcomes: Sequence[OutcomeKind]
    #: How each of those reached the upstream: "stream" or "whole".
    modes: Sequence[str]
    stalls: int = 0  # how many streamed tool-call turns stall mid-arguments
    #: The model reasons (DeepSeek's ``reasoning_content``) before its call.
    reasoning: bool = True
    #: The client must end with an error carrying proxai's message, not the answer.
    gives_up: bool = False
    codex_config: Mapping[str, object] = attrs.field(factory=dict)
    #: A negative control: deadlines out of reach, the client must still be waiting.
    control: bool = False


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
    Scenario("control-claude-stall-uncut", CLAUDE, [], [], stalls=99, control=True),
)


@attrs.define
class Run:
    """The client process's result (``code`` is None when the hard timeout ended it)."""

    code: int | None
    stdout: str
    stderr: str
    seconds: float


def base_env(home: str) -> dict[str, str]:
    """Nothing from the caller's environment but PATH and the locale: no API keys,
    no proxy settings, no config of a real installation."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
    return {**keep, "HOME": home, "TERM": "dumb", "NO_COLOR": "1"}


def toml_value(value: object) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value).lower()


def codex_setup(scenario: Scenario, proxai_url: str, home: str) -> tuple[list[str], dict[str, str]]:
    """``codex exec`` with proxai as a Responses provider; no DNS lookup, no prompt."""
    codex_home = Path(home, ".codex")
    codex_home.mkdir()
    provider: dict[str, object] = {
        "name": "proxai",
        "base_url": f"{proxai_url}/v1",
        "wire_api": "responses",
        "env_key": "PROXAI_CLIENT_KEY",
        "request_max_retries": 2,
        "stream_max_retries": 2,
        "stream_idle_timeout_ms": CODEX_IDLE_MS,
        **scenario.codex_config,
    }
    config = [
        'model = "gpt-5.5"',
        'model_provider = "proxai"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        # Otherwise Codex looks up ab.chatgpt.com, chatgpt.com and api.github.com.
        "[analytics]",
        "enabled = false",
        "[features]",
        "plugins = false",
        "[model_providers.proxai]",
        *(f"{key} = {toml_value(value)}" for key, value in provider.items()),
    ]
    (codex_home / "config.toml").write_text("\n".join(config) + "\n")
    env = {**base_env(home), "CODEX_HOME": str(codex_home), "PROXAI_CLIENT_KEY": "sk-client"}
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


def check_outcomes(
    scenario: Scenario, outcomes: Sequence[Outcome], requests: Sequence[RecordedRequest]
) -> list[str]:
    """proxai's records: kinds, the pair translated, and when the stall was cut."""
    failures: list[str] = []
    kinds = [o.kind for o in outcomes]
    if kinds != list(scenario.outcomes):
        got = [k.value if k else None for k in kinds]
        failures.append(f"proxai outcomes {got}, expected {[k.value for k in scenario.outcomes]}")
    wrong = {o.translation for o in outcomes} - {scenario.agent.translation}
    if wrong:
        failures.append(f"translation {wrong}, expected {scenario.agent.translation}")
    stalled = [i for i, o in enumerate(outcomes) if o.kind is STALLED]
    if stalled:
        took = outcomes[stalled[0]].total_s or 0.0
        deadline = TIMEOUTS["tool_arguments"]
        if not deadline <= took <= deadline + DEADLINE_SLACK:
            failures.append(f"proxai cut the stall after {took:.2f} s, not at {deadline} s")
        at = stalled[0]
        if at + 1 < len(requests):
            gap = requests[at + 1].received_at - requests[at].received_at
            if gap > RETRY_WITHIN:
                failures.append(f"the client came back {gap:.1f} s after the stalled request")
    return failures


SETUPS = {"codex": codex_setup, "claude": claude_setup}


def make_dirs(scratch: str) -> tuple[Path, Path]:
    """The client's empty HOME and working directory (not a git repository)."""
    home, work = Path(scratch, "home"), Path(scratch, "work")
    home.mkdir()
    work.mkdir()
    return home, work


async def settle(proxy: RunningProxai, path: str, count: int) -> None:
    """Wait (2 s at most) until proxai has recorded ``count`` requests to ``path``:
    a request's record is written once all its tasks have ended."""
    with trio.move_on_after(2.0):
        while sum(o.path == path for o in proxy.outcomes) < count:
            await proxy.wait_for_outcomes(len(proxy.outcomes) + 1)


async def run_scenario(scenario: Scenario) -> tuple[list[str], Run, list[Outcome], list[str]]:
    """Run one scenario; its failures, the client run, proxai's outcomes for the
    client's API requests, and proxai's other outcomes as one-line notes."""
    reasoning = REASONING if scenario.reasoning else None
    model = ChatModel(scenario.agent.call, ANSWER, reasoning=reasoning, stalls=scenario.stalls)
    upstream = ScriptedUpstream(model)
    timeouts = UNCUT if scenario.control else TIMEOUTS
    limit = CONTROL_TIMEOUT if scenario.control else PROCESS_TIMEOUT
    with tempfile.TemporaryDirectory(prefix="proxai-agent-") as scratch:
        home, work = make_dirs(scratch)
        async with trio.open_nursery() as nursery:
            await nursery.start(upstream.serve)
            async with open_proxai(
                upstream.base_url,
                upstream={"protocol": "openai_chat"},
                timeouts=timeouts,
            ) as proxy:
                argv, env = SETUPS[scenario.agent.name](scenario, proxy.url, str(home))
                run = await run_client(argv, env, str(work), limit)
                await settle(proxy, scenario.agent.path, len(upstream.requests))
                recorded = list(proxy.outcomes)
            nursery.cancel_scope.cancel()
    outcomes = [o for o in recorded if o.path == scenario.agent.path]
    notes = [
        f"{o.method} {o.path} {o.kind and o.kind.value}" for o in recorded if o not in outcomes
    ]
    if scenario.control:
        failures = [] if run.code is None else [f"the client ended by itself (exit {run.code})"]
        return failures, run, outcomes, notes
    failures: list[str] = []
    if run.code is None:
        failures.append(f"the client was still running after {limit} s")
    detail = next((o.detail for o in outcomes if o.kind is STALLED), None)
    failures += check_client(scenario, run, detail)
    failures += check_upstream(scenario, upstream.requests)
    failures += check_outcomes(scenario, outcomes, upstream.requests)
    return failures, run, outcomes, notes


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
        print(f"{title} {found} through proxai to a Chat upstream (timeouts {TIMEOUTS})")
        for scenario in scenarios:
            failures, run, outcomes, notes = await run_scenario(scenario)
            kinds = ", ".join(o.kind.value if o.kind else "none" for o in outcomes) or "none"
            status = "FAIL" if failures else "PASS"
            print(f"  {status} {scenario.name:<28} {run.seconds:5.1f} s  proxai={kinds}")
            print(f"       client: {describe(scenario, run)}")
            if verbose:
                for o in outcomes:
                    kind = o.kind and o.kind.value
                    dropped = ",".join(o.dropped) or "-"
                    print(f"       outcome {kind} {o.translation} dropped={dropped}")
                    if o.detail:
                        print(f"         detail: {o.detail}")
                for note in notes:
                    print(f"       also: {note}")
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
