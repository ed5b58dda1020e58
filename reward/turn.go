package reward

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/clawrl/clawrl/tokenizer"
)

// Turn is one answered request and what followed it: the input of scoring.
type Turn struct {
	// ID identifies the turn to the caller (e.g. response id and choice);
	// it is copied to the Sample.
	ID string

	// Messages are the messages of the request the response answered,
	// system prompt included, as given to the chat template.
	Messages []tokenizer.Message
	// Tools are the tool definitions of the request ({"type": "function",
	// "function": {...}}), as given to the chat template.
	Tools []json.RawMessage
	// TemplateVars are the extra chat-template variables the request was
	// rendered with (e.g. "enable_thinking"); the teacher context is
	// rendered with the same.
	TemplateVars map[string]any
	// Prefill is the text the prompt ended with after the generation
	// prompt (the start of a forced tool call); Response follows it.
	Prefill string

	// Response is the assistant message returned to the client (text and
	// tool calls).
	Response tokenizer.Message
	// PromptTokens is the whole prompt the policy saw, chat template
	// applied; ResponseTokens are the sampled tokens and LogProbs[i] the
	// rollout log-prob of ResponseTokens[i].
	PromptTokens   []int32
	ResponseTokens []int32
	LogProbs       []float32
	// Version is the weight version that produced the response.
	Version uint64

	// NextState holds the messages that followed the response: the user's
	// reply, tool results. Empty when none came.
	NextState []tokenizer.Message
	// Feedback is explicit feedback on the response, oldest first.
	Feedback []Feedback
}

// Feedback is explicit feedback on a response: a thumb, a text, or both.
type Feedback struct {
	// Thumb is +1 (good), -1 (bad) or 0 (none).
	Thumb int
	// Text is what the user wrote, "" for none.
	Text string
}

// validate checks what scoring relies on.
func (t *Turn) validate() error {
	switch {
	case len(t.PromptTokens) == 0:
		return errors.New("reward: turn has no prompt tokens")
	case len(t.ResponseTokens) == 0:
		return errors.New("reward: turn has no response tokens")
	case len(t.LogProbs) != len(t.ResponseTokens):
		return fmt.Errorf("reward: turn has %d log-probs for %d response tokens", len(t.LogProbs), len(t.ResponseTokens))
	}
	for i, f := range t.Feedback {
		if f.Thumb < -1 || f.Thumb > 1 {
			return fmt.Errorf("reward: feedback %d has thumb %d, want -1, 0 or +1", i, f.Thumb)
		}
	}
	return nil
}

// explicit folds the turn's feedback: the last non-zero thumb, and all
// texts joined by blank lines.
func (t *Turn) explicit() (thumb int, text string) {
	var texts []string
	for _, f := range t.Feedback {
		if f.Thumb != 0 {
			thumb = f.Thumb
		}
		if s := strings.TrimSpace(f.Text); s != "" {
			texts = append(texts, s)
		}
	}
	return thumb, strings.Join(texts, "\n\n")
}

// HintEvidence is what a hint must be grounded in (Grounded): what
// happened after the turn, as text. A user message counts less its last
// paragraph when it has several: people react first and then go on to
// their next request ("No, in bullets please.\n\nWhat is 7 + 5?"), and a
// word of the next request says nothing about the reply judged (a hint
// "End your answer with the word winter." after "Write the word winter 5
// times."). Tool results count whole, with the names of the tools called
// and the feedback text.
func HintEvidence(t *Turn, fbText string) string {
	var b strings.Builder
	for _, m := range t.NextState {
		text := m.Content
		if m.Role == "user" {
			text = withoutNextRequest(text)
		}
		b.WriteString(text)
		b.WriteString(" ")
		b.WriteString(m.Name)
		b.WriteString("\n")
	}
	for _, c := range t.Response.ToolCalls {
		b.WriteString(c.Function.Name)
		b.WriteString("\n")
	}
	b.WriteString(fbText)
	return b.String()
}

// withoutNextRequest drops the last paragraph of a message of several
// paragraphs (separated by a blank line).
func withoutNextRequest(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n"))
	i := strings.LastIndex(s, "\n\n")
	if i < 0 {
		return s
	}
	return strings.TrimSpace(s[:i])
}

// Kind says which training signal a Sample carries.
type Kind int

// Sample kinds.
const (
	// KindNone: nothing to train (reward 0 and no usable hint).
	KindNone Kind = iota
	// KindBinary: a ±1 reward on every response token.
	KindBinary
	// KindDistill: teacher log-probs under the hint context, no reward.
	KindDistill
	// KindBoth: a ±1 reward and teacher log-probs.
	KindBoth
)

func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindBinary:
		return "binary"
	case KindDistill:
		return "distill"
	case KindBoth:
		return "both"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Source says where a Sample's reward came from.
type Source string

// Reward sources.
const (
	// SourceFeedback: an explicit thumb.
	SourceFeedback Source = "feedback"
	// SourceJudge: the majority of the judge's votes (0 on a tie or when no
	// vote parsed).
	SourceJudge Source = "judge"
	// SourceJudgeFailed: the judge could not be reached or kept failing;
	// the reward is a neutral 0 (see Sample.Note).
	SourceJudgeFailed Source = "judge_failed"
	// SourceNoEvidence: no next state and no feedback, so nothing to judge;
	// the reward is 0 and the judge was not called.
	SourceNoEvidence Source = "no_evidence"
)

// Sample is a scored turn, ready for the trainer.
type Sample struct {
	TurnID string
	Kind   Kind

	// PromptTokens, ResponseTokens, LogProbs and Version are the turn's.
	PromptTokens   []int32
	ResponseTokens []int32
	LogProbs       []float32
	Version        uint64

	// Reward is -1, 0 or +1; Source says where it came from.
	Reward int
	Source Source
	// Votes are the judge's valid votes (each -1, 0 or +1), InvalidVotes
	// the number of votes that did not parse, Tie whether the majority was
	// a tie. Empty when a thumb decided or the judge was not asked.
	Votes        []int
	InvalidVotes int
	Tie          bool

	// Hint is the chosen hint, "" for none. HintVotes counts the hint
	// judge's votes and HintAccepts those that wrote a usable hint.
	Hint                   string
	HintVotes, HintAccepts int
	// TeacherLogProbs[i] is the teacher's log-prob of ResponseTokens[i]
	// under the hint context; nil unless Kind is KindDistill or KindBoth.
	TeacherLogProbs []float32

	// Rollouts are responses the teacher generated with the hint in
	// context (methods with hinted rollouts), each to be learnt token by
	// token with its teacher log-probs.
	Rollouts []HintedRollout

	// Note explains a degraded outcome (judge failure, teacher failure), ""
	// when all went as planned.
	Note string
}

// Outcome is what the judge, the hint judge and the teacher produced for a
// turn, before it becomes a Sample.
type Outcome struct {
	Reward       int
	Source       Source
	Votes        []int
	InvalidVotes int
	Tie          bool

	Hint                   string
	HintVotes, HintAccepts int
	// TeacherLogProbs are the teacher's log-probs of the response under the
	// hint context; nil when there is no hint or the teacher failed.
	TeacherLogProbs []float32

	Note string
}

// BuildSample makes the Sample of turn t from its outcome o:
//
//	hint with teacher log-probs, reward ±1  → KindBoth
//	hint with teacher log-probs, reward 0   → KindDistill
//	no usable hint,              reward ±1  → KindBinary
//	no usable hint,              reward 0   → KindNone (nothing trained)
//
// Teacher log-probs count only when there is one per response token; a
// Sample whose kind carries no distillation has TeacherLogProbs nil (the
// Hint is still reported).
func BuildSample(t Turn, o Outcome) Sample {
	s := Sample{
		TurnID:         t.ID,
		PromptTokens:   t.PromptTokens,
		ResponseTokens: t.ResponseTokens,
		LogProbs:       t.LogProbs,
		Version:        t.Version,
		Reward:         o.Reward,
		Source:         o.Source,
		Votes:          o.Votes,
		InvalidVotes:   o.InvalidVotes,
		Tie:            o.Tie,
		Hint:           o.Hint,
		HintVotes:      o.HintVotes,
		HintAccepts:    o.HintAccepts,
		Note:           o.Note,
	}
	if s.Reward < -1 || s.Reward > 1 {
		s.Reward = 0
	}
	distill := o.Hint != "" && len(o.TeacherLogProbs) > 0 && len(o.TeacherLogProbs) == len(t.ResponseTokens)
	switch {
	case distill && s.Reward != 0:
		s.Kind = KindBoth
	case distill:
		s.Kind = KindDistill
	case s.Reward != 0:
		s.Kind = KindBinary
	default:
		s.Kind = KindNone
	}
	if distill {
		s.TeacherLogProbs = o.TeacherLogProbs
	}
	return s
}
