// record.mjs: what every client script shares. It wraps fetch so that the
// requests the SDK sends and the responses it reads are kept, and reports
// what happened as one JSON line on stdout, which the Go test checks
// (schema validity is judged there, by a full JSON Schema validator).
export const env = {
  baseURL: process.env.CLAWRL_BASE_URL + '/v1',
  model: process.env.CLAWRL_MODEL,
  seeds: Number(process.env.CLAWRL_SEEDS || '20'),
};

export const report = {
  requests: 0, // HTTP requests the SDK made
  itemReferences: 0, // item_reference items it sent (Responses API)
  previousResponseIds: 0,
  calls: [], // tool calls and structured outputs the server returned: {name, arguments, schema}
  errors: [], // what the SDK threw
  notes: [],
};

const schemas = {}; // tool name -> JSON Schema, as the SDK sent it

// The sampling seed of the requests that follow (added to bodies that do
// not carry one: not every SDK passes a seed on), so that a run is
// reproducible.
let seed;
export function setSeed(n) {
  seed = n;
}

const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  report.requests++;
  let body;
  try {
    body = init && typeof init.body === 'string' ? JSON.parse(init.body) : undefined;
  } catch {}
  if (body) {
    if (seed !== undefined && body.seed === undefined) {
      body.seed = seed;
      init = { ...init, body: JSON.stringify(body) };
    }
    for (const t of body.tools || []) {
      const name = t.name || (t.function && t.function.name);
      const params = t.parameters || (t.function && t.function.parameters);
      if (name) schemas[name] = params;
    }
    const rf = body.response_format || (body.text && body.text.format);
    if (rf && rf.type === 'json_schema') {
      const js = rf.json_schema || rf;
      schemas['#' + js.name] = js.schema;
    }
    for (const it of Array.isArray(body.input) ? body.input : []) {
      if (it && it.type === 'item_reference') report.itemReferences++;
    }
    if (body.previous_response_id) report.previousResponseIds++;
  }
  const resp = await realFetch(input, init);
  const text = await resp.clone().text();
  collect(text, body);
  return resp;
};

// collect finds the tool calls (and structured outputs) in a response
// body, plain JSON or server-sent events.
function collect(text, body) {
  const docs = [];
  if (text.startsWith('{')) {
    try { docs.push(JSON.parse(text)); } catch {}
  } else {
    for (const line of text.split('\n')) {
      if (line.startsWith('data: ') && line !== 'data: [DONE]') {
        try { docs.push(JSON.parse(line.slice(6))); } catch {}
      }
    }
  }
  const chatArgs = {}; // streamed chat tool calls by index
  for (const d of docs) {
    // Responses API, whole or the item done event.
    const items = d.object === 'response' ? d.output : d.type === 'response.output_item.done' ? [d.item] : [];
    for (const it of items || []) {
      if (it.type === 'function_call') add(it.name, it.arguments);
      if (it.type === 'message' && body && body.text && body.text.format && body.text.format.type === 'json_schema') {
        add('#' + body.text.format.name, it.content.map((c) => c.text).join(''));
      }
    }
    // Chat completions.
    for (const ch of d.choices || []) {
      const m = ch.message;
      if (m) {
        for (const tc of m.tool_calls || []) add(tc.function.name, tc.function.arguments);
        if (body && body.response_format && body.response_format.type === 'json_schema' && m.content) {
          add('#' + body.response_format.json_schema.name, m.content);
        }
      }
      for (const tc of (ch.delta && ch.delta.tool_calls) || []) {
        const c = (chatArgs[tc.index] ||= { name: '', arguments: '' });
        if (tc.function && tc.function.name) c.name = tc.function.name;
        if (tc.function && tc.function.arguments) c.arguments += tc.function.arguments;
      }
    }
  }
  for (const c of Object.values(chatArgs)) add(c.name, c.arguments);
}

function add(name, args) {
  report.calls.push({ name, arguments: args, schema: schemas[name] === undefined ? null : schemas[name], declared: name in schemas });
}

export function fail(where, err) {
  report.errors.push(`${where}: ${err && err.name ? err.name + ': ' : ''}${(err && err.message) || err}`.slice(0, 600));
}

export function done() {
  process.stdout.write(JSON.stringify(report) + '\n');
}
