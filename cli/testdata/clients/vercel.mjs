// The Vercel AI SDK's default OpenAI provider (the Responses API, with
// store left on, so earlier output is replayed as item_reference): for
// each seed, three turns, each a tool loop (the first step must call the
// tool, the next ones may).
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, tool } from 'ai';
import { z } from 'zod';
import { done, env, fail, report, setSeed } from './record.mjs';

globalThis.AI_SDK_LOG_WARNINGS = false;

const openai = createOpenAI({ baseURL: env.baseURL, apiKey: 'test-key' });
const model = openai(env.model);
const tools = {
  get_weather: tool({
    description: 'Get the current weather of a city',
    inputSchema: z.object({
      city: z.string().max(24),
      unit: z.enum(['celsius', 'fahrenheit']).nullable(),
    }),
    execute: async ({ city, unit }) => ({ city, temperature: 21, unit: unit ?? 'celsius' }),
  }),
};
const questions = ['What is the weather in Paris?', 'And in Oslo?', 'Thanks. Which one is warmer?'];

report.turns = 0;
report.toolErrors = 0;
for (let seed = 0; seed < env.seeds; seed++) {
  const messages = [];
  setSeed(seed);
  try {
    for (const q of questions) {
      messages.push({ role: 'user', content: q });
      const result = await generateText({
        model, tools, messages, temperature: 1, maxOutputTokens: 120, maxRetries: 0,
        stopWhen: stepCountIs(3),
        prepareStep: ({ stepNumber }) => (stepNumber === 0 ? { toolChoice: 'required' } : { toolChoice: 'auto' }),
      });
      for (const step of result.steps) {
        for (const part of step.content) {
          if (part.type === 'tool-error') {
            report.toolErrors++;
            fail(`seed ${seed}`, part.error);
          }
        }
      }
      messages.push(...result.response.messages);
      report.turns++;
    }
  } catch (err) {
    fail(`seed ${seed}`, err);
  }
}
done();
