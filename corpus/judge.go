package corpus

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

// Judge conversations: the prompts the reward stage's local judge sends
// (reward.JudgeMessages and reward.HintMessages, the very text the daemon
// renders), answered with a one-sentence reason and a \boxed{} verdict, so
// that the bundled model can judge the feedback on its own replies: praise
// and acceptance, factual corrections, corrections of the form of a reply
// (an instruction the reply did not follow), repeated requests,
// complaints, unrelated or unclear continuations, and the results of the
// reply's tool calls. The hint judge turns a correction into the
// instruction the reply should have followed.

// Evidence classes of what happened next, each with its verdict and the
// reason the judge gives.
const (
	evPraise     = "praise"
	evMovesOn    = "moves_on"
	evFactFix    = "fact_correction"
	evFormFix    = "form_correction"
	evRepeat     = "repeat"
	evComplaint  = "complaint"
	evNeutral    = "neutral"
	evToolOK     = "tool_ok"
	evToolError  = "tool_error"
	evFeedbackUp = "feedback_up"
	evFeedbackDn = "feedback_down"
)

var evidence = map[string]struct {
	vote   int
	reason string
}{
	evPraise:     {1, "The user thanks the assistant and accepts the reply."},
	evMovesOn:    {1, "The user accepts the reply and moves on to a next request."},
	evFactFix:    {-1, "The user says the reply is wrong and corrects it, so the reply did not serve them."},
	evFormFix:    {-1, "The user asks for a different form of answer, so the reply did not do what they want."},
	evRepeat:     {-1, "The user repeats the same request, which shows the reply did not give them what they wanted."},
	evComplaint:  {-1, "The user complains about the reply."},
	evNeutral:    {0, "The user's next message does not show whether the reply helped."},
	evToolOK:     {1, "The tool call ran successfully and the work carried on."},
	evToolError:  {-1, "The tool call failed because of the reply."},
	evFeedbackUp: {1, "The user's feedback says the reply was good."},
	evFeedbackDn: {-1, "The user's feedback says the reply was wrong."},
}

var thanksReactions = []string{"Thanks!", "Great, thank you.", "Perfect, that's what I needed.", "Correct, thanks.", "Nice, thanks a lot!",
	"Awesome.", "That helps, thanks.", "Yes, that's it."}
var unclearReactions = []string{"ok", "hmm", "Let's talk about something else.", "What's your favourite color?", "brb", "Interesting.",
	"I'll be back later.", "Who won the game last night?", "wait", "Never mind."}
var complaints = []string{"That's not what I asked.", "This is useless.", "You are not listening to me.", "That doesn't help at all.",
	"Ugh, no.", "Why would you say that?"}
var toolErrors = []string{"file not found: %s", "invalid argument: %s", "missing required parameter: %s", "permission denied: %s",
	"unknown value: %s"}

// judgeCase is a judged turn: the turn, the class of what happened next,
// and the hint that a correction teaches ("" for none).
type judgeCase struct {
	turn     reward.Turn
	class    string
	feedback string
	hint     string
}

func genJudgeCase(r *rand.Rand) judgeCase {
	var msgs []tokenizer.Message
	var sys string
	if r.IntN(3) == 0 {
		sys = pick(r, shortSystems)
	}
	if r.IntN(4) == 0 { // an earlier exchange
		q0, a0, _ := plainQA(r)
		msgs = append(msgs, user(q0), assistant(a0))
	}
	next := func(q string) string { // what a user says next, sometimes with a new question
		if r.IntN(2) == 0 {
			q2, _, _ := plainQA(r)
			return q + " " + q2
		}
		return q
	}
	withSys := func(ms []tokenizer.Message) []tokenizer.Message {
		if sys == "" {
			return ms
		}
		return append([]tokenizer.Message{{Role: "system", Content: sys}}, ms...)
	}
	var c judgeCase
	switch k := r.IntN(40); {
	case k < 8: // a reply that did not follow a preference, and the user's correction
		cs := []instruct.Constraint{instruct.Random(r, randKind(r), instruct.Train)}
		q, plain, _, ok := violated(r, cs)
		if !ok {
			return genJudgeCase(r)
		}
		c.turn = reward.Turn{Messages: withSys(append(msgs, user(q))), Response: assistant(plain),
			NextState: []tokenizer.Message{user(next(cs[0].Correction(r, instruct.Train)))}}
		// The hint is the instruction in its canonical phrasing, whichever
		// the correction used: the one the teacher follows best.
		c.class, c.hint = evFormFix, cs[0].Instruction(nil, instruct.Train)
	case k < 14: // a reply that followed a preference (or a plain one), and praise
		q, a, _ := plainQA(r)
		if r.IntN(2) == 0 {
			cs := []instruct.Constraint{instruct.Random(r, randKind(r), instruct.Train)}
			if applied, ok := applyAll(cs, a); ok {
				a = applied
			}
		}
		praise := instruct.Praise(r)
		if r.IntN(2) == 0 {
			praise = pick(r, thanksReactions)
		}
		c.turn = reward.Turn{Messages: withSys(append(msgs, user(q))), Response: assistant(a), NextState: []tokenizer.Message{user(next(praise))}}
		c.class = evPraise
	case k < 18: // a right answer, and the next request
		q, a, _ := plainQA(r)
		q2, _, _ := plainQA(r)
		c.turn = reward.Turn{Messages: withSys(append(msgs, user(q))), Response: assistant(a),
			NextState: []tokenizer.Message{user(pick(r, []string{"OK. ", "Good. Next: ", "", "Alright. ", "Now, "}) + q2)}}
		c.class = evMovesOn
	case k < 23: // a wrong answer, and a correction of its content
		q, x, isArith := correctable(r)
		fb := pick(r, correctionLeads)
		if isArith && r.IntN(2) == 0 {
			fb = fmt.Sprintf("%s %d %s %d is %d.", fb, x.a, x.sym(), x.b, x.result())
		} else if q.Fix != "" && r.IntN(2) == 0 {
			fb = q.Fix
		}
		c.turn = reward.Turn{Messages: withSys(append(msgs, user(q.Q))), Response: assistant(q.Wrong), NextState: []tokenizer.Message{user(fb)}}
		c.class = evFactFix
		c.hint = "Check the answer carefully before replying; the user expects the exact correct result."
		if isArith {
			c.hint = fmt.Sprintf("Compute %d %s %d step by step and check the result before answering.", x.a, x.sym(), x.b)
		}
	case k < 25: // a wrong answer, and the same request again
		q, _, _ := correctable(r)
		c.turn = reward.Turn{Messages: withSys(append(msgs, user(q.Q))), Response: assistant(q.Wrong), NextState: []tokenizer.Message{user(q.Q)}}
		c.class = evRepeat
	case k < 27:
		q, a, _ := plainQA(r)
		if r.IntN(2) == 0 {
			qq, _, _ := correctable(r)
			q, a = qq.Q, qq.Wrong
		}
		c.turn = reward.Turn{Messages: withSys(append(msgs, user(q))), Response: assistant(a), NextState: []tokenizer.Message{user(pick(r, complaints))}}
		c.class = evComplaint
	case k < 32: // nothing to read from what came next
		q, a, _ := plainQA(r)
		c.turn = reward.Turn{Messages: withSys(append(msgs, user(q))), Response: assistant(a), NextState: []tokenizer.Message{user(pick(r, unclearReactions))}}
		c.class = evNeutral
	case k < 37: // a tool call, and its result
		perm := r.Perm(len(toolDefs))
		offered := perm[:1+r.IntN(3)]
		need := toolDefs[offered[0]]
		s := need.scene(r)
		call := toolCall(need.name, s.args)
		result, class := s.result, evToolOK
		if strings.Contains(result, "error") || strings.Contains(result, "exit_code\": 127") || r.IntN(2) == 0 {
			arg := need.name
			if len(s.args) > 0 {
				arg = fmt.Sprint(s.args[0].v)
			}
			result, class = jsonText(obj{{"error", fmt.Sprintf(pick(r, toolErrors), arg)}}), evToolError
		}
		for _, i := range offered {
			c.turn.Tools = append(c.turn.Tools, toolDefs[i].definition())
		}
		c.turn.Messages = withSys(append(msgs, user(s.ask)))
		c.turn.Response = tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{call}}
		c.turn.NextState = []tokenizer.Message{{Role: "tool", Content: result, Name: need.name}}
		c.class = class
		if class == evToolError {
			c.hint = fmt.Sprintf("The %s call failed with an error; check its arguments before calling it.", need.name)
		}
	default: // explicit feedback, with an unclear next message or none
		q, a, _ := plainQA(r)
		c.turn = reward.Turn{Messages: withSys(append(msgs, user(q))), Response: assistant(a)}
		if r.IntN(2) == 0 {
			c.turn.NextState = []tokenizer.Message{user(pick(r, unclearReactions))}
		}
		if r.IntN(2) == 0 {
			c.feedback, c.class = pick(r, []string{"good", "Correct.", "helpful", "great answer"}), evFeedbackUp
		} else {
			qq, _, _ := correctable(r)
			c.turn.Messages[len(c.turn.Messages)-1] = user(qq.Q)
			c.turn.Response = assistant(qq.Wrong)
			c.feedback, c.class = pick(r, []string{"wrong answer", "This is incorrect.", "bad"}), evFeedbackDn
		}
	}
	return c
}

// genJudge is a judge conversation: the vote judge's prompt and verdict,
// or (one in three) the hint judge's.
func genJudge(r *rand.Rand) Example {
	c := genJudgeCase(r)
	key := fmt.Sprintf("judge:%s|%s|%v", c.class, c.turn.Response.Content, c.turn.NextState)
	if len(c.turn.Response.ToolCalls) > 0 {
		key += string(c.turn.Response.ToolCalls[0].Function.Arguments)
	}
	if r.IntN(3) == 0 {
		return Example{Messages: append(reward.HintMessages(&c.turn, c.feedback, reward.DefaultLimits()), assistant(hintAnswer(c))),
			Key: key + "|hint", Want: c.class}
	}
	e := evidence[c.class]
	a := fmt.Sprintf("%s \\boxed{%d}", e.reason, e.vote)
	return Example{Messages: append(reward.JudgeMessages(&c.turn, c.feedback, reward.DefaultLimits()), assistant(a)), Key: key,
		Want: fmt.Sprint(e.vote)}
}

// hintAnswer is the hint judge's answer to c.
func hintAnswer(c judgeCase) string {
	if c.hint == "" {
		return "What happened next teaches nothing concrete about the reply. \\boxed{0}"
	}
	lead := "The user corrected the reply, so there is something to learn."
	switch c.class {
	case evFormFix:
		lead = "The user wants a different form of answer, which the assistant can apply."
	case evToolError:
		lead = "The tool call failed, so there is something to learn."
	}
	return fmt.Sprintf("%s\n[HINT_START]\n%s\n[HINT_END]\n\\boxed{1}", lead, c.hint)
}
