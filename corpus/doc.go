// Package corpus generates the bundled model's training conversations:
// short assistant dialogues of the kinds in Categories (arithmetic, unit
// conversions, tool calls, JSON, the judge's own votes and hints, sessions
// with a lasting preference, verifiable instructions), rendered through
// the bundled chat template exactly as the server renders requests, with a
// split into training and held-out phrasings (package instruct).
//
// It is data, not training: it imports no model, backend or engine, so
// that the serving path's users of it (replay's pretraining-mix samples,
// the learning bench's simulated user and skill probes) do not pull in
// the pretraining program (package pretrain, which trains the bundled
// model on this corpus). Answers are computed, so they are right; held-out
// cases for evaluating the judge (HintCases, SessionCases) and the readers
// of generated answers (LastInteger, ParseToolCall) live here beside the
// generator they must agree with.
package corpus
