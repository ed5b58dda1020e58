// Package session groups a client's chat requests into sessions and turns,
// and hands completed turns to the reward stage.
//
// A main turn is one generated reply to one request. Its training signal is
// the next state: what the client sent next in the same session (a user
// reply, tool results), and any explicit feedback. The Tracker remembers each
// session's latest turn until the next request of that session arrives, then
// emits the turn, with its next state, as a Record through a Sink.
//
// # Which session a request belongs to
//
// A request names its session explicitly (the server takes it from the
// X-Session-Id header, the body's session_id, user or prompt_cache_key), or
// the Tracker infers it from the conversation: a request continues a stored
// turn when its messages are that turn's messages up to the last user or
// tool message it answered, followed by that turn's reply. Messages are
// compared by content after normalisation (developer is system; whitespace
// runs collapse; tool-call ids, reasoning and names are ignored; tool-call
// arguments are compared as canonical JSON), through SHA-256 chains over the
// normalised messages, so a lookup costs one hash per message and one map
// probe per assistant message, however long the system prompt. Up to
// MaxDroppedTrailing messages that trailed the earlier request may be absent
// from the later one (clients such as OpenClaw append an ephemeral context
// message that they do not keep in their history). Two conversations that
// share a system prompt and first message stay apart once their replies
// differ; two with identical replies cannot be told apart, and the later
// turn wins.
//
// Memory is bounded: at most MaxSessions sessions, each forgotten after
// IdleTimeout without requests, each remembering its last MaxTurnsPerSession
// turns for matching and feedback. A turn still waiting for its next state
// when its session is forgotten is emitted with EndExpired.
package session

import (
	"encoding/json"
	"time"

	"github.com/clawrl/clawrl/tokenizer"
)

// EndReason says how a turn's wait for its next state ended.
type EndReason string

// End reasons.
const (
	// EndNextState: the session's next request continued this turn;
	// NextState holds its new trailing messages.
	EndNextState EndReason = "next_state"
	// EndUnmatched: the next request of an explicitly named session did not
	// contain this turn's reply (the client rewrote or compacted its
	// history); NextState holds that request's trailing user and tool
	// messages, a weaker signal than EndNextState.
	EndUnmatched EndReason = "next_state_unmatched"
	// EndSessionDone: the client closed the session (X-Session-Done); the
	// turn is the last of its session and has no next state.
	EndSessionDone EndReason = "session_done"
	// EndSuperseded: the session went on from another turn (an unchosen
	// choice of an n>1 response, or a regenerated reply); no next state.
	EndSuperseded EndReason = "superseded"
	// EndExpired: the session was forgotten (idle timeout or capacity)
	// before a next state arrived.
	EndExpired EndReason = "expired"
	// EndShutdown: the server stopped before a next state arrived.
	EndShutdown EndReason = "shutdown"
)

// Turn is the record of one main turn: what the model saw, what it sampled
// and under which weights, and what came next.
type Turn struct {
	SessionID string
	// Inferred is true when the session id was inferred from the
	// conversation rather than given by the client.
	Inferred bool
	// Index is the turn's position in its session, from 0. The choices of
	// one n>1 response share an index.
	Index int
	// ResponseID is the id the client saw (chatcmpl-..., resp_...).
	ResponseID string
	// Choice is the choice index within the response.
	Choice int
	// Endpoint is "chat.completions" or "responses".
	Endpoint string
	Model    string

	// Messages is the conversation as received, normalised (content parts
	// flattened to text, developer turned into system).
	Messages []tokenizer.Message
	// Tools are the tool definitions given to the chat template, in the
	// chat-completions form {"type": "function", "function": {...}}: the
	// request's, or none with tool_choice "none" (the model never saw
	// them).
	Tools []json.RawMessage
	// TemplateVars are the chat template's variables the prompt was
	// rendered with (the server's, and the request's chat_template_kwargs
	// over them), and Prefill the text rendered after the generation
	// prompt (the start of a forced tool call). With Messages and Tools
	// they are the turn's render spec: rendering them again gives
	// PromptTokens exactly, which is how the teacher and the hinted
	// rollouts see the student's own context (reward.RenderPrompt).
	TemplateVars map[string]any
	Prefill      string
	// Reply is the assistant message returned to the client.
	Reply tokenizer.Message

	// PromptTokens is the whole prompt, chat template applied.
	PromptTokens []int32
	// ResponseTokens are the sampled tokens, the final stop token included
	// when one was sampled; LogProbs[i] is the model's own log-prob of
	// ResponseTokens[i] (temperature 1, whole vocabulary), and
	// SampleLogProbs[i] its log-prob under the distribution it was drawn
	// from (temperature, top-k/top-p, grammar mask: the behaviour policy
	// the trainer corrects for; rollout.Event.SampleLogProb). Forced[i]
	// reports a token the grammar left no alternative to (nil: none).
	ResponseTokens []int32
	LogProbs       []float32
	SampleLogProbs []float32
	Forced         []bool
	// Version is the weight version that produced the first response token.
	Version uint64
	// Versions is nil when every response token came from Version;
	// otherwise Versions[i] is the version of ResponseTokens[i].
	Versions []uint64
	// FinishReason is the OpenAI finish reason (stop, length, tool_calls).
	FinishReason string

	// NextState holds the messages that followed the reply (see End).
	NextState []tokenizer.Message
	End       EndReason
	// Feedback lists the explicit feedback received before the turn was
	// emitted. Each item was also emitted as its own KindFeedback record,
	// with the same ID.
	Feedback []Feedback

	// Keys are the digests under which the Tracker matches a request that
	// continues this turn (opaque; they reveal nothing of the text). A
	// store keeps them so that a restarted Tracker can match the turn
	// again (Tracker.Restore).
	Keys [][32]byte

	Received   time.Time // the request arrived
	FirstToken time.Time // the first response token arrived
	Finished   time.Time // the generation ended
	Completed  time.Time // the next state (or another End) arrived
}

// Feedback is explicit feedback on a turn (POST /v1/feedback).
type Feedback struct {
	ID         string
	SessionID  string
	TurnIndex  int
	Choice     int
	ResponseID string
	// Thumb is +1, -1, or 0 when only Text was given.
	Thumb    int
	Text     string
	Received time.Time
}

// Kind says what a Record carries.
type Kind int

// Record kinds.
const (
	KindTurn     Kind = iota + 1 // a completed turn
	KindFeedback                 // explicit feedback on a turn
	// KindRecorded is a turn just generated, before its response's last
	// bytes reach the client and long before its next state: a durable
	// sink stores it then, and the Tracker waits for that (Flusher). The
	// same turn comes again as KindTurn when it completes.
	KindRecorded
)

func (k Kind) String() string {
	switch k {
	case KindTurn:
		return "turn"
	case KindFeedback:
		return "feedback"
	case KindRecorded:
		return "recorded"
	}
	return "unknown"
}

// Record is one item for the reward stage.
type Record struct {
	Kind     Kind
	Turn     *Turn     // when Kind is KindTurn
	Feedback *Feedback // when Kind is KindFeedback
}

// Sink receives records. Offer must not block: it reports false when it
// cannot take rec now, and the Tracker counts rec as dropped.
//
// This is the seam for durability: a Sink that writes rec to the store
// before (or instead of) queueing it never has to refuse.
type Sink interface {
	Offer(rec Record) bool
}

// Flusher is a Sink that stores records durably. Flush returns once every
// record offered before it is durable; the Tracker calls it after offering
// a recorded turn, outside its lock, so that a turn is on disk before its
// response completes.
type Flusher interface {
	Flush() error
}

// Archive finds turns the Tracker no longer remembers (a session that
// ended or expired, a turn from before a restart), so that feedback on
// them is still taken. FindTurn returns the turn's identity (SessionID,
// Index, Choice, ResponseID set) or an error wrapping ErrUnknownTurn.
type Archive interface {
	FindTurn(req FeedbackRequest) (Feedback, error)
}

// ChanSink is a Sink over a bounded channel.
type ChanSink struct {
	ch chan Record
}

// NewChanSink returns a sink that holds up to size records (at least 1).
func NewChanSink(size int) *ChanSink {
	return &ChanSink{ch: make(chan Record, max(size, 1))}
}

// Offer queues rec unless the channel is full.
func (s *ChanSink) Offer(rec Record) bool {
	select {
	case s.ch <- rec:
		return true
	default:
		return false
	}
}

// C is the channel the consumer reads records from. It is never closed.
func (s *ChanSink) C() <-chan Record { return s.ch }
