package pretrain

import (
	"fmt"
	"math/rand/v2"

	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

// Judge conversations: the prompts the reward stage's local judge sends
// (reward.JudgeMessages and reward.HintMessages, the very text the daemon
// renders), answered with a one-sentence reason and a \boxed{} verdict, so
// that the bundled model can judge the feedback on its own replies.

type reaction struct {
	next   string // the user's next message
	vote   int
	reason string
}

var thanksReactions = []string{"Thanks!", "Great, thank you.", "Perfect, that's what I needed.", "Correct, thanks.", "Nice, thanks a lot!"}
var unclearReactions = []string{"ok", "hmm", "Let's talk about something else.", "What's your favourite color?", "brb", "Interesting."}

func genJudge(r *rand.Rand) Example {
	q, x, isArith := correctable(r)
	wrong := r.IntN(2) == 0
	resp := q.A
	if wrong {
		resp = q.Wrong
	}
	var rc reaction
	var feedback string
	switch k := r.IntN(10); {
	case wrong && k < 5:
		fb := pick(r, correctionLeads)
		if isArith && r.IntN(2) == 0 {
			fb = fmt.Sprintf("%s %d %s %d is %d.", fb, x.a, x.sym(), x.b, x.result())
		}
		rc = reaction{fb, -1, "The user says the reply is wrong and corrects it, so the reply did not serve them."}
	case wrong && k < 7:
		rc = reaction{q.Q, -1, "The user repeats the same request, which shows the reply did not give them what they wanted."}
	case wrong && k < 8:
		feedback = pick(r, []string{"wrong answer", "This is incorrect.", "bad"})
		rc = reaction{pick(r, unclearReactions), -1, "The user's feedback says the reply was wrong."}
	case !wrong && k < 5:
		rc = reaction{pick(r, thanksReactions), 1, "The user thanks the assistant and accepts the reply."}
	case !wrong && k < 8:
		q2, _, _ := correctable(r)
		rc = reaction{pick(r, []string{"OK. ", "Good. Next: ", ""}) + q2.Q, 1, "The user accepts the reply and moves on to a next request."}
	default:
		rc = reaction{pick(r, unclearReactions), 0, "The user's next message does not show whether the reply helped."}
	}
	var msgs []tokenizer.Message
	if r.IntN(3) == 0 {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: pick(r, shortSystems)})
	}
	turn := &reward.Turn{
		Messages:  append(msgs, user(q.Q)),
		Response:  assistant(resp),
		NextState: []tokenizer.Message{user(rc.next)},
	}
	key := fmt.Sprintf("judge:%s|%s|%s", q.Key, resp, rc.next)
	if r.IntN(4) == 0 { // the hint judge
		var a string
		if rc.vote == -1 && feedback == "" && rc.next != q.Q {
			hint := "Check the answer carefully before replying; the user expects the exact correct result."
			if isArith {
				hint = fmt.Sprintf("Compute %d %s %d step by step and check the result before answering.", x.a, x.sym(), x.b)
			}
			a = fmt.Sprintf("The user corrected the reply, so there is something to learn.\n[HINT_START]\n%s\n[HINT_END]\n\\boxed{1}", hint)
		} else {
			a = "What happened next teaches nothing concrete about the reply. \\boxed{0}"
		}
		return Example{Messages: append(reward.HintMessages(turn, feedback, reward.DefaultLimits()), assistant(a)), Key: key + "|hint"}
	}
	a := fmt.Sprintf("%s \\boxed{%d}", rc.reason, rc.vote)
	return Example{Messages: append(reward.JudgeMessages(turn, feedback, reward.DefaultLimits()), assistant(a)), Key: key}
}
