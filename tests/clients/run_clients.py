"""Client conformance: the real Vercel AI SDK (``ai`` + ``@ai-sdk/openai``) against proxai.

For each scenario this starts a :class:`ScriptedUpstream` playing the scenario's
scripts and a real proxai server in front of it (small deadlines), runs
``node vercel_client.mjs <scenario> <base_url>`` against proxai, and checks

- the client's exit status and its one-line JSON verdict (the SDK-side expectation),
- proxai's recorded outcome kind for every request, and how many requests reached
  the upstream,
- that proxai gave up at the scenario's deadline: not sooner (its message names that
  time) and not much later,
- that the error message the SDK surfaced is proxai's own (``Outcome.detail``).

Two scenarios put proxai's translation in between: the upstream speaks only Chat
Completions (``upstream.protocol = "openai_chat"``, ``chat_upstream.ChatModel``) and
the SDK's Responses provider runs a two-step tool loop, then meets a stall
mid-arguments.

Then the *negative controls* run the same client against a scripted server standing
in for a misbehaving proxy (a stream ended silently, a stream that never ends, ...):
each must make the client fail, or the scenarios above would prove nothing.

Run with ``make test-clients`` (it installs the npm packages first). Exits non-zero
if any check failed; the last line is ``N passed, M failed``. ``-v`` also prints each
scenario's client verdict (the full JSON line).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
from chat_upstream import ChatModel, ToolCall, reasoning_sent_with, tool_messages
from messages_upstream import MessagesModel, assistant_text_with, tool_results

from proxai.outcome import Outcome, OutcomeKind
from proxai.testing import RecordedRequest, Script, ScriptedUpstream, Sleep, Stall, open_proxai
from proxai.testing.seed import TURN1_EVENTS
from proxai.testing.upstream import Responder

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "vercel_client.mjs"

#: proxai's deadlines for every scenario: small, and tool_arguments < idle so the
#: outcome kind tells which one fired.
TIMEOUTS = {"first_byte": 0.5, "tool_arguments": 0.3, "idle": 0.5, "total": 15.0}
#: The client's own hard timeout (ms) and ours around it (s): neither may be reached.
CLIENT_TIMEOUT_MS = 20_000
PROCESS_TIMEOUT = 30.0
#: The hard timeout for negative controls whose proxy never ends the stream.
CONTROL_TIMEOUT_MS = 3_000

#: The seed's turn 1 (web_search status, then the get_weather call). Its response
#: snapshots carry ``created_at``, which the SDK's schema requires on
#: ``response.created`` (without it the SDK reports a TypeValidationError and
#: finishReason 'error', even for a healthy turn).
IN_PROGRESS = {
    "type": "response.in_progress",
    "sequence_number": 1,
    "response": TURN1_EVENTS[0]["response"],
}
#: response.created, then silence: no output item yet.
CREATED_STALL = Script.sse(TURN1_EVENTS[:1], then=[Stall()])
#: response.created + response.in_progress (as OpenAI sends them), then silence.
EARLY_STALL = Script.sse([TURN1_EVENTS[0], IN_PROGRESS], then=[Stall()])


@attrs.frozen
class Scenario:
    """One run of the client through proxai."""

    name: str
    client: str  # the client's scenario name (its expectation)
    #: Played by the upstream, one per request; or a function making a fresh
    #: responder (a ChatModel keeps state across requests).
    scripts: Sequence[Script] | Callable[[], Responder]
    outcomes: Sequence[OutcomeKind]  # proxai's outcome kind for each request, in order
    #: The deadline that must end the first failed request: proxai must give up no
    #: sooner than this (its message names the time) and not much later.
    deadline: float | None = None
    #: Whether the SDK's error message must equal the first failed outcome's detail.
    proxai_message: bool = True
    #: The upstream's protocol, and the pair every outcome must record as translated
    #: (``None``: passed through).
    protocol: str = "openai"
    translation: str | None = None
    #: More checks on what reached the upstream.
    check_upstream: Callable[[Sequence[RecordedRequest]], list[str]] | None = None
    #: How many of the responses proxai must have stored (``Outcome.stored_as``).
    stored: int = 0


@attrs.frozen
class Control:
    """The client run against a scripted misbehaving proxy: it must fail."""

    title: str
    scenario: str  # the client's scenario name
    script: Script
    timeout_ms: int = CLIENT_TIMEOUT_MS


#: How late a deadline may fire on a real clock (scheduling, a loaded CI machine).
DEADLINE_SLACK = 1.0
#: A healthy upstream that takes a moment before its first event and between events,
#: as a real one does (well under every deadline).
FIRST_EVENT_DELAY = 0.1
PACED_TURN1 = Script(
    steps=(Sleep(FIRST_EVENT_DELAY), *Script.sse(TURN1_EVENTS, delay=0.02).steps),
)

#: The tool loop over a Chat upstream: get_weather (after a sentence of text), then the
#: answer. vercel_client.mjs's get_weather returns WEATHER_REPORT.
WEATHER_CALL = ToolCall("call_weather_01", "get_weather", {"city": "北京", "date": "today"})
WEATHER_REPORT = "北京 today: sunny, AQI 42"
LOOP_ANSWER = "空气质量良好（AQI 42），适合跑步。"


#: DeepSeek-style reasoning before the call: it must come back on the next turn.
REASONING = "The user asks about running outside: check the air quality first."
#: What the model says before it calls get_weather.
TEXT_BEFORE_CALL = "我查一下北京今天的天气。"


def chat_model(stalls: int = 0) -> Callable[[], Responder]:
    return lambda: ChatModel(
        WEATHER_CALL,
        LOOP_ANSWER,
        reasoning=REASONING,
        text_before_call=TEXT_BEFORE_CALL,
        stalls=stalls,
    )


def loop_history_sent(requests: Sequence[RecordedRequest]) -> list[str]:
    """The second turn's history: the SDK ran get_weather and sent its result as a
    tool message, and the call's reasoning came back as ``reasoning_content`` (the
    stateless round trip through the reasoning item's ``encrypted_content``)."""
    if len(requests) < 2:
        return []
    body = requests[-1].json()
    failures: list[str] = []
    results = tool_messages(body)
    if not any(i == WEATHER_CALL.id and WEATHER_REPORT in text for i, text in results):
        failures.append(f"the last upstream request has no tool result {WEATHER_REPORT!r}")
    reasoning = reasoning_sent_with(body, WEATHER_CALL.id)
    if reasoning != [REASONING]:
        failures.append(f"the call's reasoning came back as {reasoning}, expected [{REASONING!r}]")
    return failures


def messages_model() -> Responder:
    return MessagesModel(
        WEATHER_CALL, LOOP_ANSWER, thinking=REASONING, text_before_call=TEXT_BEFORE_CALL
    )


def loop_history_sent_to_messages(requests: Sequence[RecordedRequest]) -> list[str]:
    """The second turn's history on a Messages upstream: the text before the call (the
    SDK sent it as an ``item_reference``; proxai resolved it from the stored first
    step), the call, and its result."""
    if len(requests) < 2:
        return []
    body = requests[-1].json()
    failures: list[str] = []
    if not any(i == WEATHER_CALL.id and WEATHER_REPORT in t for i, t in tool_results(body)):
        failures.append(f"the last upstream request has no tool result {WEATHER_REPORT!r}")
    said = assistant_text_with(body, WEATHER_CALL.id)
    if said != [TEXT_BEFORE_CALL]:
        failures.append(f"the call's text came back as {said}, expected [{TEXT_BEFORE_CALL!r}]")
    return failures


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "healthy",
        "healthy",
        [Script.sse(TURN1_EVENTS)],
        [OutcomeKind.COMPLETED],
        proxai_message=False,
    ),
    Scenario(
        "healthy-paced",
        "healthy",
        [PACED_TURN1],
        [OutcomeKind.COMPLETED],
        proxai_message=False,
    ),
    Scenario(
        "stall-mid-arguments",
        "stall-mid-arguments",
        [Script.sse(TURN1_EVENTS[:6], then=[Stall()])],
        [OutcomeKind.STALLED_TOOL_ARGUMENTS],
        deadline=TIMEOUTS["tool_arguments"],
    ),
    Scenario(
        "error-before-output",
        "error-before-output",
        [CREATED_STALL],
        [OutcomeKind.STALLED_IDLE],
        deadline=TIMEOUTS["idle"],
    ),
    Scenario(
        "error-after-in-progress",
        "error-before-output",
        [EARLY_STALL],
        [OutcomeKind.STALLED_IDLE],
        deadline=TIMEOUTS["idle"],
    ),
    Scenario(
        "retry-after-error-before-output",
        "retry-after-error-before-output",
        [EARLY_STALL, Script.sse(TURN1_EVENTS)],
        [OutcomeKind.STALLED_IDLE, OutcomeKind.COMPLETED],
        deadline=TIMEOUTS["idle"],
        proxai_message=False,
    ),
    Scenario(
        "stall-before-event",
        "stall-before-event",
        [Script(steps=[Stall()])],
        [OutcomeKind.STALLED_IDLE],
        deadline=TIMEOUTS["idle"],
    ),
    Scenario(
        "stall-before-headers",
        "stall-before-headers",
        [Script(before_head=[Stall()])],
        [OutcomeKind.STALLED_FIRST_BYTE],
        deadline=TIMEOUTS["first_byte"],
    ),
    Scenario(
        "chat-upstream-tool-loop",
        "tool-loop",
        chat_model(),
        [OutcomeKind.COMPLETED, OutcomeKind.COMPLETED],
        proxai_message=False,
        protocol="openai_chat",
        translation="responses→chat",
        check_upstream=loop_history_sent,
    ),
    Scenario(
        "chat-upstream-tool-loop-stored",
        "tool-loop-stored",
        chat_model(),
        [OutcomeKind.COMPLETED, OutcomeKind.COMPLETED],
        proxai_message=False,
        protocol="openai_chat",
        translation="responses→chat",
        check_upstream=loop_history_sent,
        stored=2,
    ),
    Scenario(
        "messages-upstream-tool-loop-stored",
        "tool-loop-stored-plain",
        messages_model,
        [OutcomeKind.COMPLETED, OutcomeKind.COMPLETED],
        proxai_message=False,
        protocol="anthropic_messages",
        translation="responses→messages",
        check_upstream=loop_history_sent_to_messages,
        stored=2,
    ),
    Scenario(
        "chat-upstream-stall-mid-arguments",
        "chat-stall-mid-arguments",
        chat_model(stalls=1),
        [OutcomeKind.STALLED_TOOL_ARGUMENTS],
        deadline=TIMEOUTS["tool_arguments"],
        protocol="openai_chat",
        translation="responses→chat",
        stored=1,  # the SDK's default store: true; failed, stored as OpenAI stores it
    ),
)

CONTROLS: tuple[Control, ...] = (
    Control(
        "mid-arguments stream ended silently",
        "stall-mid-arguments",
        Script.sse(TURN1_EVENTS[:6]),
    ),
    Control(
        "mid-arguments stream never ended",
        "stall-mid-arguments",
        Script.sse(TURN1_EVENTS[:6], then=[Stall()]),
        timeout_ms=CONTROL_TIMEOUT_MS,
    ),
    Control(
        "stream ended silently after response.in_progress",
        "error-before-output",
        Script.sse([TURN1_EVENTS[0], IN_PROGRESS]),
    ),
    Control("200 with an empty event stream", "stall-before-event", Script()),
    Control(
        "502 instead of 504",
        "stall-before-headers",
        Script.json(
            {
                "error": {
                    "message": "bad gateway",
                    "type": "server_error",
                    "param": None,
                    "code": "upstream_closed",
                }
            },
            status=502,
        ),
    ),
    Control("healthy turn cut before arguments.done", "healthy", Script.sse(TURN1_EVENTS[:7])),
)


@attrs.define
class Run:
    """The client process's result."""

    code: int
    verdict: dict[str, Any] | None
    stdout: str
    stderr: str
    seconds: float


async def run_client(
    node: str, scenario: str, base_url: str, timeout_ms: int = CLIENT_TIMEOUT_MS
) -> Run:
    env = {**os.environ, "VERCEL_CLIENT_TIMEOUT_MS": str(timeout_ms)}
    started = trio.current_time()
    with trio.fail_after(PROCESS_TIMEOUT):
        done = await trio.run_process(
            [node, str(CLIENT), scenario, base_url],
            cwd=HERE,
            env=env,
            check=False,
            capture_stdout=True,
            capture_stderr=True,
        )
    stdout = done.stdout.decode(errors="replace")
    verdict: dict[str, Any] | None = None
    lines = stdout.strip().splitlines()
    if lines:
        try:
            verdict = json.loads(lines[-1])
        except ValueError:
            verdict = None
    return Run(
        done.returncode,
        verdict,
        stdout,
        done.stderr.decode(errors="replace"),
        trio.current_time() - started,
    )


def describe_sdk(verdict: dict[str, Any] | None) -> str:
    """What the SDK surfaced, in one short phrase."""
    if verdict is None:
        return "no verdict"
    seen = verdict["observed"]
    error = seen["thrown"] or (seen["errorParts"][0] if seen["errorParts"] else None)
    parts: list[str] = []
    if error is not None:
        where = "thrown" if seen["thrown"] else "error part"
        fields = ", ".join(
            f"{key}={error[key]!r}" for key in ("statusCode", "isRetryable") if key in error
        )
        kind = error.get("class") or "?"
        if error.get("isAPICallError"):
            kind += " (APICallError)"
        parts.append(f"{where} {kind} {fields}: {error.get('message')!r}")
    if seen["toolCalls"]:
        calls = ", ".join(
            f"{c['toolName']}({json.dumps(c['input'], ensure_ascii=False)})"
            for c in seen["toolCalls"]
        )
        parts.append(f"tool calls {calls}")
    parts.append(f"finishReason={seen['finishReason']}")
    return "; ".join(parts)


def sdk_error_message(verdict: dict[str, Any]) -> str | None:
    seen = verdict["observed"]
    if seen["thrown"]:
        message = seen["thrown"].get("message")
    elif seen["errorParts"]:
        message = seen["errorParts"][0].get("message")
    else:
        return None
    return message if isinstance(message, str) else None


async def run_scenario(node: str, scenario: Scenario) -> tuple[list[str], Run | None, str]:
    """Run one scenario; return its failures, the client run and proxai's outcome kinds."""
    scripts = scenario.scripts() if callable(scenario.scripts) else scenario.scripts
    upstream = ScriptedUpstream(scripts)
    outcomes: list[Outcome] = []
    run: Run | None = None
    failures: list[str] = []
    async with trio.open_nursery() as nursery:
        upstream_url = await nursery.start(upstream.serve)
        # Retries off: each scenario checks how the SDK meets one upstream failure.
        retries = {"max_attempts": 1}
        async with open_proxai(
            upstream_url,
            timeouts=TIMEOUTS,
            retries=retries,
            upstream={"protocol": scenario.protocol},
        ) as proxy:
            try:
                run = await run_client(node, scenario.client, proxy.base_url)
            except trio.TooSlowError:
                failures.append(f"the client did not exit within {PROCESS_TIMEOUT} s")
            with trio.move_on_after(2.0):
                await proxy.wait_for_outcomes(len(scenario.outcomes))
            outcomes = list(proxy.outcomes)
        nursery.cancel_scope.cancel()

    kinds = [o.kind for o in outcomes]
    if kinds != list(scenario.outcomes):
        want = [k.value for k in scenario.outcomes]
        failures.append(f"proxai outcomes {[k and k.value for k in kinds]}, expected {want}")
    failed = [o for o in outcomes if o.kind is not OutcomeKind.COMPLETED]
    if scenario.deadline is not None and failed and failed[0].total_s is not None:
        took = failed[0].total_s
        if not scenario.deadline <= took <= scenario.deadline + DEADLINE_SLACK:
            failures.append(
                f"proxai gave up after {took:.3f} s, expected the {scenario.deadline} s deadline"
            )
    if len(upstream.requests) != len(scenario.outcomes):
        failures.append(
            f"{len(upstream.requests)} upstream requests, expected {len(scenario.outcomes)}"
        )
    stored = sum(o.stored_as is not None for o in outcomes)
    if stored != scenario.stored:
        failures.append(f"proxai stored {stored} responses, expected {scenario.stored}")
    translated = {o.translation for o in outcomes} - {scenario.translation}
    if translated:
        failures.append(
            f"proxai recorded translation {translated}, expected {scenario.translation}"
        )
    if scenario.check_upstream is not None:
        failures.extend(scenario.check_upstream(upstream.requests))
    if run is not None:
        if run.verdict is None:
            failures.append(f"no JSON verdict from the client (exit {run.code})")
        else:
            failures.extend(f"sdk: {f}" for f in run.verdict["failures"])
            if scenario.proxai_message:
                detail = failed[0].detail if failed else None
                message = sdk_error_message(run.verdict)
                if message is None or message != detail:
                    failures.append(f"sdk error message {message!r} is not proxai's {detail!r}")
        if run.code != 0 and not failures:
            failures.append(f"the client exited {run.code}")
    return failures, run, ", ".join(k.value if k else "none" for k in kinds)


async def run_control(node: str, control: Control) -> tuple[list[str], Run | None]:
    """Serve the misbehaving proxy's script directly; the client must fail on it."""
    upstream = ScriptedUpstream([control.script])
    run: Run | None = None
    failures: list[str] = []
    async with trio.open_nursery() as nursery:
        url = await nursery.start(upstream.serve)
        try:
            run = await run_client(node, control.scenario, url, control.timeout_ms)
        except trio.TooSlowError:
            failures.append(f"the client did not exit within {PROCESS_TIMEOUT} s")
        nursery.cancel_scope.cancel()
    if run is not None and (run.code != 1 or run.verdict is None or run.verdict["ok"] is not False):
        failures.append(f"the client accepted a misbehaving proxy (exit {run.code})")
    return failures, run


def print_failure_details(failures: Sequence[str], run: Run | None) -> None:
    for failure in failures:
        print(f"      - {failure}")
    if run is None:
        return
    if run.verdict is None:
        print(f"      stdout: {run.stdout.strip()[-2000:]}")
    if run.stderr.strip():
        print(f"      stderr: {run.stderr.strip()[-2000:]}")


def installed(package: str) -> str:
    """The version of ``package`` that npm installed here."""
    manifest = HERE / "node_modules" / package / "package.json"
    return str(json.loads(manifest.read_text())["version"])


async def main(verbose: bool = False, only: Sequence[str] = ()) -> int:
    node = shutil.which("node")
    if node is None:
        print("node is not on PATH")
        print("0 passed, 1 failed")
        return 1
    if not (HERE / "node_modules" / "ai").is_dir():
        print(f"npm packages missing: run `npm ci` in {HERE} (or `make test-clients`)")
        print("0 passed, 1 failed")
        return 1
    passed = failed = 0
    sdk = f"ai {installed('ai')}, @ai-sdk/openai {installed('@ai-sdk/openai')}"
    print(f"Vercel AI SDK ({sdk}) through proxai (timeouts {TIMEOUTS})")
    unknown = set(only) - {s.name for s in SCENARIOS}
    if unknown:
        print(f"unknown scenarios {sorted(unknown)}; known: {[s.name for s in SCENARIOS]}")
        print("0 passed, 1 failed")
        return 1
    scenarios = [s for s in SCENARIOS if not only or s.name in only]
    for scenario in scenarios:
        failures, run, kinds = await run_scenario(node, scenario)
        verdict = run.verdict if run else None
        seconds = f"{run.seconds:.1f} s" if run else "-"
        status = "FAIL" if failures else "PASS"
        print(f"  {status} {scenario.name:<36} {seconds:>6}  proxai={kinds}")
        print(f"       sdk: {describe_sdk(verdict)}")
        if verbose and run is not None:
            print(f"       client: {run.stdout.strip()}")
        if failures:
            failed += 1
            print_failure_details(failures, run)
        else:
            passed += 1
    controls = () if only else CONTROLS
    if controls:
        print("Negative controls (a misbehaving proxy must make the client fail)")
    for control in controls:
        failures, run = await run_control(node, control)
        status = "FAIL" if failures else "PASS"
        why = "; ".join(run.verdict["failures"]) if run and run.verdict else "-"
        label = f"{control.scenario} vs {control.title}"
        print(f"  {status} {label}")
        print(f"       client rejected it: {why}")
        if failures:
            failed += 1
            print_failure_details(failures, run)
        else:
            passed += 1
    print(f"Ran: Vercel AI SDK ({sdk}), {len(scenarios)} scenarios, {len(controls)} controls")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    arguments = sys.argv[1:]
    names = [a for a in arguments if not a.startswith("-")]
    sys.exit(trio.run(main, "-v" in arguments, names))
