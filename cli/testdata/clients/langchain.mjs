// LangChain's ChatOpenAI structured output (chat completions), both of
// its methods: a forced function call and response_format json_schema.
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import { done, env, fail, report, setSeed } from './record.mjs';

const answer = z.object({
  answer: z.string().max(40).describe('The answer, briefly'),
  confidence: z.number().int().min(0).max(100),
  tags: z.array(z.string().max(12)).max(3),
  source: z.string().nullable(),
  // A nullable object: anyOf in the schema the SDK sends.
  place: z.object({ city: z.string().max(20), country: z.string().max(20) }).nullable(),
});

report.parsed = {};
for (const method of ['functionCalling', 'jsonSchema']) {
  report.parsed[method] = 0;
  for (let seed = 0; seed < env.seeds; seed++) {
    setSeed(seed);
    const llm = new ChatOpenAI({
      model: env.model, apiKey: 'test-key', temperature: 1, maxTokens: 150, maxRetries: 0,
      configuration: { baseURL: env.baseURL },
    });
    try {
      const out = await llm.withStructuredOutput(answer, { name: 'answer', method }).invoke('What is the capital of France?');
      answer.parse(out);
      report.parsed[method]++;
    } catch (err) {
      fail(`${method} seed ${seed}`, err);
    }
  }
}
done();
