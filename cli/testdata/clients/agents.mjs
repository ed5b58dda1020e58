// The OpenAI Agents SDK (its tools are strict by default) over the
// Responses API, tool choice auto: for each seed, one run of an agent with
// two tools, up to four model turns.
import { Agent, MaxTurnsExceededError, OpenAIProvider, Runner, setTracingDisabled, tool } from '@openai/agents';
import { z } from 'zod';
import { done, env, fail, report, setSeed } from './record.mjs';

setTracingDisabled(true);
const runner = new Runner({ modelProvider: new OpenAIProvider({ baseURL: env.baseURL, apiKey: 'test-key', useResponses: true }) });
const getWeather = tool({
  name: 'get_weather',
  description: 'Get the current weather of a city',
  parameters: z.object({ city: z.string(), unit: z.enum(['celsius', 'fahrenheit']).nullable() }),
  execute: async ({ city, unit }) => `It is 21 degrees ${unit ?? 'celsius'} in ${city}.`,
});
const getTime = tool({
  name: 'get_time',
  description: 'Get the local time of a city',
  parameters: z.object({ city: z.string(), format: z.enum(['12h', '24h']) }),
  execute: async ({ city, format }) => `It is ${format === '12h' ? '3 pm' : '15:00'} in ${city}.`,
});
const agent = new Agent({
  name: 'Assistant',
  instructions: 'You answer questions about cities. Use the tools.',
  tools: [getWeather, getTime],
  model: env.model,
  modelSettings: { temperature: 1, toolChoice: 'auto', maxTokens: 120 },
});

report.runs = 0;
report.maxTurns = 0;
for (let seed = 0; seed < env.seeds; seed++) {
  setSeed(seed);
  try {
    await runner.run(agent, 'What is the weather in Paris, and what time is it there?', { maxTurns: 4 });
    report.runs++;
  } catch (err) {
    if (err instanceof MaxTurnsExceededError) {
      report.maxTurns++; // the model kept calling tools: not a failure of the contract
      report.runs++;
      continue;
    }
    fail(`seed ${seed}`, err);
  }
}
done();
