// One client-conformance scenario run with the real Vercel AI SDK against proxai.
//
//   node vercel_client.mjs <scenario> <base_url>     (or $SCENARIO and $OPENAI_BASE_URL)
//
// Streams one Responses call with `streamText` from `ai` and the model
// `createOpenAI({ baseURL }).responses('gpt-5.4')`, records what the SDK surfaced
// (stream parts, error parts, thrown errors, finish reason, tool calls), checks the
// scenario's expectation and prints ONE line of JSON:
//
//   {"scenario", "ok", "failures": [...], "observed": {...}}
//
// Exit status: 0 when the expectation holds, 1 when it does not (or on a hard
// timeout: $VERCEL_CLIENT_TIMEOUT_MS, default 20000), 2 on bad usage.
// run_clients.py plays the upstream for each scenario; see README.md.

import { createOpenAI } from '@ai-sdk/openai';
import { APICallError, jsonSchema, stepCountIs, streamText, tool } from 'ai';

const HARD_TIMEOUT_MS = Number(process.env.VERCEL_CLIENT_TIMEOUT_MS ?? 20_000);
const QUESTION = '北京今天适合跑步吗？如果空气质量不好，请查一下官方建议。';
const WEATHER_INPUT = { city: '北京', date: 'today' };
const STALLED_CALL = 'while streaming arguments of function_call get_weather (call_weather_01)';
// The same call from a Chat Completions upstream (run_clients.py's chat scenarios).
const STALLED_CHAT_CALL = 'while streaming arguments of tool call get_weather (call_weather_01)';
const CHAT_FIRST_DELTAS = '{"city": "北京",';
// What get_weather returns in the tool loop, and the model's answer after it.
const WEATHER_REPORT = '北京 today: sunny, AQI 42';
const LOOP_ANSWER = '空气质量良好（AQI 42），适合跑步。';
const OUTPUT_PART = /^(text|reasoning|tool-input)-|^(tool-call|tool-result|source|file)$/;

/**
 * @typedef {object} ErrorView  What an error surfaced by the SDK looked like.
 * @property {string} [class]  constructor name
 * @property {string} [name]
 * @property {boolean} isAPICallError  `APICallError.isInstance(error)`
 * @property {string} [message]
 * @property {number} [statusCode]
 * @property {boolean} [isRetryable]
 * @property {string} [type]
 * @property {string} [code]
 * @property {unknown} [data]
 * @property {string} [reason]  RetryError only
 * @property {ErrorView[]} [errors]  RetryError only
 */

/**
 * @typedef {object} Observed  Everything the SDK surfaced during one run.
 * @property {string[]} parts  `fullStream` part types, in order
 * @property {ErrorView[]} errorParts  the `error` parts' errors
 * @property {ErrorView[]} onError  errors passed to `streamText`'s `onError`
 * @property {ErrorView | null} thrown  what iterating `fullStream` threw
 * @property {string | null} finishReason  `await result.finishReason`
 * @property {ErrorView | null} finishReasonError  what `await result.finishReason` threw
 * @property {{toolName: string, input: unknown}[]} toolCalls  `tool-call` parts
 * @property {string[]} toolInputDeltas  `tool-input-delta` parts' deltas
 * @property {{toolName: string, output: unknown}[]} toolResults  `tool-result` parts
 * @property {string | null} text  `await result.text`: the last step's text
 * @property {number | null} steps  `(await result.steps).length`
 * @property {number} ms  time from the call to the end of the stream
 * @property {string[][]} sentInputTypes  each request's `input[].type` (`message`
 *   for an item without one), as the SDK sent it: whether it sent `item_reference`s
 */

/**
 * @typedef {object} Scenario
 * @property {number} maxRetries
 * @property {boolean} [loop]  get_weather runs (returns WEATHER_REPORT) and the SDK
 *   sends its result back in a second step
 * @property {boolean} [store]  with `loop`: leave the SDK's default `store: true`, so
 *   the second step sends the earlier reasoning and text as `item_reference`s (proxai
 *   resolves them from the response it stored); otherwise the loop sets
 *   `store: false` and the SDK sends every earlier item itself
 * @property {string} [model]  the model id (default gpt-5.4, which the SDK treats as
 *   a reasoning model)
 * @property {(seen: Observed, errors: {raw: unknown, view: ErrorView}[]) => string[]} check
 *   the failed expectations (empty when the scenario passes)
 */

/** @type {Observed} */
const observed = {
  parts: [],
  errorParts: [],
  onError: [],
  thrown: null,
  finishReason: null,
  finishReasonError: null,
  toolCalls: [],
  toolInputDeltas: [],
  toolResults: [],
  text: null,
  steps: null,
  ms: 0,
  sentInputTypes: [],
};

/**
 * @param {unknown} error
 * @returns {ErrorView}
 */
function describe(error) {
  if (error === null || typeof error !== 'object') {
    return { isAPICallError: false, message: String(error) };
  }
  const e = /** @type {Record<string, any>} */ (error);
  /** @type {ErrorView} */
  const view = {
    class: e.constructor?.name,
    name: e.name,
    isAPICallError: APICallError.isInstance(error),
    message: e.message,
    statusCode: e.statusCode,
    isRetryable: e.isRetryable,
    type: e.type,
    code: e.code,
    data: e.data,
  };
  if (Array.isArray(e.errors)) {
    view.reason = e.reason;
    view.errors = e.errors.map(describe);
  }
  return view;
}

/**
 * Every error the SDK surfaced, raw and described: error parts first, then a throw.
 * @param {unknown[]} raw
 */
function surfaced(raw) {
  return raw.map((error) => ({ raw: error, view: describe(error) }));
}

/**
 * Expectations for a healthy stream: no error anywhere, the get_weather call complete,
 * and the stream finished with `finishReason`.
 * @param {string} finishReason
 * @returns {Scenario['check']}
 */
function expectWeatherCall(finishReason) {
  return (seen, errors) => {
    const failures = [];
    if (errors.length) failures.push(`expected no error, got ${JSON.stringify(errors[0].view)}`);
    const calls = JSON.stringify(seen.toolCalls);
    const want = JSON.stringify([{ toolName: 'get_weather', input: WEATHER_INPUT }]);
    if (calls !== want) failures.push(`expected tool calls ${want}, got ${calls}`);
    if (seen.finishReason !== finishReason) {
      failures.push(`expected finishReason '${finishReason}', got ${seen.finishReason}`);
    }
    return failures;
  };
}

const expectToolCall = expectWeatherCall('tool-calls');

/**
 * Expectations for an error before any output: one retryable APICallError, no output.
 * @param {(view: ErrorView) => string[]} more  scenario-specific checks on the error
 * @returns {Scenario['check']}
 */
function expectRetryableAPICallError(more) {
  return (seen, errors) => {
    const failures = [];
    const output = seen.parts.filter((type) => OUTPUT_PART.test(type));
    if (output.length) failures.push(`expected no output parts, got ${output.join(',')}`);
    if (errors.length !== 1) {
      failures.push(`expected exactly one error, got ${errors.length}`);
    }
    if (!errors.length) return failures;
    const { raw, view } = errors[0];
    if (!APICallError.isInstance(raw)) failures.push(`expected an APICallError, got ${view.class}`);
    if (view.isRetryable !== true) {
      failures.push(`expected isRetryable true, got ${view.isRetryable}`);
    }
    if (!(typeof view.statusCode === 'number' && view.statusCode >= 500)) {
      failures.push(`expected statusCode >= 500, got ${view.statusCode}`);
    }
    return [...failures, ...more(view)];
  };
}

/** @type {Record<string, Scenario>} */
const SCENARIOS = {
  // The seed's turn 1 relayed to its end.
  healthy: { maxRetries: 0, check: expectToolCall },

  // Turn 1 stalled after the first arguments delta: output has started, so proxai
  // appends `error` + `response.failed`; the SDK must end the stream with an error.
  'stall-mid-arguments': {
    maxRetries: 0,
    check: expectStalledCall(STALLED_CALL, '{"city":"北京"'),
  },

  // The same stall from a Chat Completions upstream, through proxai's translation.
  'chat-stall-mid-arguments': {
    maxRetries: 0,
    check: expectStalledCall(STALLED_CHAT_CALL, CHAT_FIRST_DELTAS),
  },

  // Two steps from a Chat Completions upstream, through proxai's translation: the
  // model calls get_weather, the SDK runs it and sends the result, the model answers.
  // `store: false`: the second step sends every earlier item itself.
  'tool-loop': { maxRetries: 0, loop: true, check: expectLoop(false) },

  // The same loop with the SDK's default `store: true`: the second step sends the
  // earlier reasoning and text as `item_reference`s, which proxai resolves from the
  // first step's response, stored because the upstream keeps none.
  'tool-loop-stored': { maxRetries: 0, loop: true, store: true, check: expectLoop(true) },

  // The same with a model the SDK takes for one without reasoning (gpt-4.1): it then
  // sends the earlier text as an `item_reference` even with no reasoning before it
  // (for gpt-5.4 it refers to text only after reasoning). For upstreams that do not
  // reason unless asked, as Anthropic's.
  'tool-loop-stored-plain': {
    maxRetries: 0,
    loop: true,
    store: true,
    model: 'gpt-4.1',
    check: expectLoop(true),
  },

  // response.created + response.in_progress, then a stall: proxai's error comes before
  // any output, which the SDK turns into a (retryable) failed call.
  'error-before-output': {
    maxRetries: 0,
    check: expectRetryableAPICallError((view) =>
      String(view.message).startsWith('upstream sent nothing for')
        ? []
        : [`expected proxai's idle message, got ${view.message}`],
    ),
  },

  // The same failed first attempt, but the SDK may retry once: the retry succeeds.
  'retry-after-error-before-output': { maxRetries: 1, check: expectToolCall },

  // Headers, then nothing: proxai answers 504 upstream_timeout.
  'stall-before-event': {
    maxRetries: 0,
    check: expectRetryableAPICallError(expect504),
  },

  // No headers at all: proxai answers 504 upstream_timeout at first_byte.
  'stall-before-headers': {
    maxRetries: 0,
    check: expectRetryableAPICallError(expect504),
  },
};

/**
 * Expectations for the two-step tool loop: the call, its result sent back, the answer;
 * and whether the second step referred to earlier items by `item_reference`.
 * @param {boolean} references
 * @returns {Scenario['check']}
 */
function expectLoop(references) {
  return (seen, errors) => {
    const failures = expectWeatherCall('stop')(seen, errors);
    const results = JSON.stringify(seen.toolResults);
    const want = JSON.stringify([{ toolName: 'get_weather', output: WEATHER_REPORT }]);
    if (results !== want) failures.push(`expected tool results ${want}, got ${results}`);
    if (seen.steps !== 2) failures.push(`expected 2 steps, got ${seen.steps}`);
    if (seen.text !== LOOP_ANSWER) {
      failures.push(`expected the answer ${JSON.stringify(LOOP_ANSWER)}, got ${seen.text}`);
    }
    const second = seen.sentInputTypes[1] ?? [];
    if (second.includes('item_reference') !== references) {
      const how = references ? 'with' : 'without';
      const sent = JSON.stringify(second);
      failures.push(`expected the second step ${how} item_reference, sent ${sent}`);
    }
    return failures;
  };
}

/**
 * Expectations for a stall mid-arguments: the deltas so far, then one error part
 * naming the stalled call, no tool call, finishReason 'error'.
 * @param {string} stalledCall  text proxai's message must contain
 * @param {string} deltas  the arguments deltas sent before the stall, joined
 * @returns {Scenario['check']}
 */
function expectStalledCall(stalledCall, deltas) {
  return (seen, errors) => {
    const failures = [];
    const firstError = seen.parts.indexOf('error');
    const started = seen.parts.indexOf('tool-input-delta');
    if (started < 0 || (firstError >= 0 && started > firstError)) {
      failures.push('expected tool-input-delta parts before the error (output had started)');
    }
    if (seen.toolInputDeltas.join('') !== deltas) {
      const got = JSON.stringify(seen.toolInputDeltas);
      failures.push(`expected the arguments deltas ${JSON.stringify(deltas)}, got ${got}`);
    }
    if (seen.errorParts.length !== 1) {
      failures.push(`expected exactly one error part, got ${seen.errorParts.length}`);
    } else if (!String(seen.errorParts[0].message).includes(stalledCall)) {
      const message = seen.errorParts[0].message;
      failures.push(`expected an error naming the stalled call, got ${message}`);
    }
    if (seen.thrown) failures.push(`expected no throw, got ${JSON.stringify(seen.thrown)}`);
    if (seen.toolCalls.length) failures.push('truncated arguments became a tool-call part');
    if (seen.finishReason !== 'error') {
      failures.push(`expected finishReason 'error', got ${seen.finishReason}`);
    }
    if (!errors.length) failures.push('no error surfaced');
    return failures;
  };
}

/**
 * @param {ErrorView} view
 * @returns {string[]}
 */
function expect504(view) {
  const failures = [];
  if (view.statusCode !== 504) failures.push(`expected statusCode 504, got ${view.statusCode}`);
  const code = /** @type {any} */ (view.data)?.error?.code;
  if (code !== 'upstream_timeout') failures.push(`expected code upstream_timeout, got ${code}`);
  return failures;
}

/**
 * @param {string} scenario
 * @param {boolean} ok
 * @param {string[]} failures
 */
function report(scenario, ok, failures) {
  process.stdout.write(`${JSON.stringify({ scenario, ok, failures, observed })}\n`);
}

/**
 * `fetch` that notes the type of each input item the SDK sends.
 * @type {typeof fetch}
 */
async function recordingFetch(input, init) {
  if (typeof init?.body === 'string') {
    try {
      const items = JSON.parse(init.body).input;
      if (Array.isArray(items)) {
        observed.sentInputTypes.push(items.map((item) => item?.type ?? 'message'));
      }
    } catch {
      // not JSON: nothing to note
    }
  }
  return fetch(input, init);
}

/**
 * @param {string} baseURL
 * @param {Scenario} scenario
 */
async function run(baseURL, scenario) {
  const openai = createOpenAI({ baseURL, apiKey: 'sk-test', fetch: recordingFetch });
  const started = performance.now();
  const result = streamText({
    model: openai.responses(scenario.model ?? 'gpt-5.4'),
    prompt: QUESTION,
    tools: {
      get_weather: tool({
        description: '查询指定城市的天气和空气质量摘要。',
        inputSchema: jsonSchema({
          type: 'object',
          properties: { city: { type: 'string' }, date: { type: 'string' } },
          required: ['city', 'date'],
          additionalProperties: false,
        }),
        ...(scenario.loop && { execute: async () => WEATHER_REPORT }),
      }),
    },
    ...(scenario.loop && { stopWhen: stepCountIs(2) }),
    ...(scenario.loop && !scenario.store && { providerOptions: { openai: { store: false } } }),
    maxRetries: scenario.maxRetries,
    onError: ({ error }) => {
      observed.onError.push(describe(error));
    },
  });
  /** @type {unknown[]} */
  const raw = [];
  try {
    for await (const part of result.fullStream) {
      observed.parts.push(part.type);
      if (part.type === 'error') {
        raw.push(part.error);
        observed.errorParts.push(describe(part.error));
      } else if (part.type === 'tool-call') {
        observed.toolCalls.push({ toolName: part.toolName, input: part.input });
      } else if (part.type === 'tool-input-delta') {
        observed.toolInputDeltas.push(part.delta);
      } else if (part.type === 'tool-result') {
        observed.toolResults.push({ toolName: part.toolName, output: part.output });
      }
    }
  } catch (error) {
    raw.push(error);
    observed.thrown = describe(error);
  }
  observed.ms = Math.round(performance.now() - started);
  try {
    observed.finishReason = await result.finishReason;
    if (scenario.loop) {
      observed.text = await result.text;
      observed.steps = (await result.steps).length;
    }
  } catch (error) {
    observed.finishReasonError = describe(error);
  }
  return scenario.check(observed, surfaced(raw));
}

async function main() {
  const name = process.argv[2] ?? process.env.SCENARIO;
  const baseURL = process.argv[3] ?? process.env.OPENAI_BASE_URL;
  const scenario = name === undefined ? undefined : SCENARIOS[name];
  if (scenario === undefined || baseURL === undefined) {
    process.stderr.write(
      `usage: node vercel_client.mjs <${Object.keys(SCENARIOS).join('|')}> <base_url>\n`,
    );
    process.exit(2);
  }
  const timer = setTimeout(() => {
    report(name, false, [`hard timeout: the SDK was still waiting after ${HARD_TIMEOUT_MS} ms`]);
    process.exit(1);
  }, HARD_TIMEOUT_MS);
  let failures;
  try {
    failures = await run(baseURL, scenario);
  } catch (error) {
    failures = [`unexpected exception: ${JSON.stringify(describe(error))}`];
  }
  clearTimeout(timer);
  report(name, failures.length === 0, failures);
  process.exit(failures.length === 0 ? 0 : 1);
}

await main();
