// Package reward is clawrl's judge: it turns a served turn and what came
// after it into training signal.
//
// A Turn is one answered request (its messages, the sampled response and
// the rollout's log-probs) together with its next state (the user's reply or
// the tool results that followed) and any explicit feedback. Scoring a turn
// has three parts:
//
//   - Votes. The judge reads a bounded rendering of the conversation, the
//     response and the next state, reasons briefly and ends with \boxed{1},
//     \boxed{-1} or \boxed{0}. Votes are sampled m times in parallel; the
//     last box outside code fences counts (ParseVote); the majority wins,
//     and a tie or no valid vote gives 0 (Majority). An explicit thumb
//     replaces the vote; its text becomes part of the next state. When the
//     user's next message goes on after its opening reaction, the judge
//     reads the reaction alone, then with the sentence after it, and never
//     what follows (reaction.go): text a user appends cannot flip the vote
//     on a complaint.
//
// What the judges read is quoted: text from the conversation cannot cast a
// vote (a quoted \boxed{1} is defused), write a hint marker, open or close
// a section of the transcript ("=== END ===" and role lines are rewritten
// inside quoted text), or make control tokens (the local judge encodes its
// prompt with tokenizer.EncodeChat; a remote judge gets control-token
// spellings broken).
//   - Hints. The hint judge reads the same rendering and either declines
//     (\boxed{0}) or writes a short, concrete hint between [HINT_START] and
//     [HINT_END] and accepts (\boxed{1}) (ParseHint). Of the hints of the
//     accepting votes, one is chosen (the longest, by default).
//   - The teacher. The hint is appended to the last user message under
//     HintMarker, the conversation is re-rendered with the chat template
//     (TeacherPrompt), and a Teacher scores the original response tokens
//     under that context in one forward pass: per-token log-probs that
//     serve as a token-level target for distillation.
//
// BuildSample folds the outcome into a Sample: binary (a ±1 reward),
// distillation (teacher log-probs), both, or none (nothing to train).
//
// # Backends
//
// A Backend samples n completions of a chat. LocalBackend runs them on an
// in-process rollout.Generator with the tokenizer's chat template;
// OpenAIBackend calls any OpenAI-compatible /chat/completions endpoint.
// Scorer wraps every judge call in a per-attempt timeout, a semaphore that
// bounds calls in flight, and retries with exponential back-off; a judge
// that keeps failing yields a neutral score with a logged reason and a
// metric, never an endless wait.
//
// # Running
//
// Scorer.Score scores one turn synchronously. Scorer.Run runs a bounded pool
// of workers over a bounded input queue: Submit never blocks and returns
// ErrBusy when the queue is full, so the caller can persist the turn and
// offer it again later; results arrive on Results.
//
// Nothing in this package changes model weights: the teacher only reads.
package reward
