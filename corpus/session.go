package corpus

import (
	"fmt"
	"math/rand/v2"

	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

// Judged turns inside sessions, as the daemon's judge sees them when a
// person with a lasting preference chats: earlier exchanges in which the
// person praised the replies that kept to the preference and corrected
// those that did not, the reply to judge, and the person's next message
// (praise or a correction, often followed by the next question after a
// blank line, as `clawrl bench learn` and real users write). The vote
// judge answers as for any turn; the hint judge turns a correction into
// the preference's canonical instruction (instruct.Constraint.Instruction
// with a nil source: the first Train phrasing, the one the teacher context
// follows best), whatever phrasing the person used, and writes no hint
// after praise.

// sessionCase is a judged turn of a session and the preference behind it.
type sessionCase struct {
	judgeCase
	pref instruct.Constraint
}

// genSessionCase draws a judged session turn. The person's corrections
// use phrasings of split; the preference's argument is of the Train split
// (the bench's preferences are).
func genSessionCase(r *rand.Rand, split instruct.Split) sessionCase {
	pref := instruct.Random(r, randKind(r), instruct.Train)
	var msgs []tokenizer.Message
	if r.IntN(4) == 0 {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: pick(r, shortSystems)})
	}
	// reply answers q under pref when follow, else plainly; ok is whether
	// it satisfies pref.
	reply := func(follow bool) (q, a string, ok bool) {
		for range 100 {
			q, plain, _ := plainQA(r)
			if follow {
				if applied, good := applyAll([]instruct.Constraint{pref}, plain); good {
					return q, applied, true
				}
				continue
			}
			if !pref.Check(plain) {
				return q, plain, false
			}
		}
		q, a, _ = plainQA(r)
		return q, a, pref.Check(a)
	}
	reaction := func(ok bool) string {
		if ok {
			return instruct.Praise(r)
		}
		return pref.Correction(r, split)
	}
	// Earlier exchanges: the model follows the preference more often once
	// it has been corrected, as a model that learns in context would.
	pending, corrected := "", false
	for range r.IntN(4) {
		q, a, ok := reply(corrected && r.IntN(3) > 0 || r.IntN(4) == 0)
		if pending != "" {
			q = pending + "\n\n" + q
		}
		msgs = append(msgs, user(q), assistant(a))
		pending = reaction(ok)
		corrected = corrected || !ok
	}
	q, a, ok := reply(r.IntN(5) < 2)
	if pending != "" {
		q = pending + "\n\n" + q
	}
	msgs = append(msgs, user(q))
	next := reaction(ok)
	if r.IntN(4) > 0 {
		q2, _, _ := plainQA(r)
		next += "\n\n" + q2
	}
	c := sessionCase{pref: pref}
	c.turn = reward.Turn{Messages: msgs, Response: assistant(a), NextState: []tokenizer.Message{user(next)}}
	c.class = evPraise
	if !ok {
		c.class, c.hint = evFormFix, pref.Instruction(nil, instruct.Train)
	}
	return c
}

// genJudgeSession is a judge conversation on a session turn: the vote
// judge's (half) or the hint judge's.
func genJudgeSession(r *rand.Rand) Example {
	c := genSessionCase(r, instruct.Train)
	key := fmt.Sprintf("judge:%s|%s|%v", c.class, c.turn.Response.Content, c.turn.NextState)
	if r.IntN(2) == 0 {
		return Example{Messages: append(reward.HintMessages(&c.turn, "", reward.DefaultLimits()), assistant(hintAnswer(c.judgeCase))),
			Key: key + "|hint", Want: c.class}
	}
	e := evidence[c.class]
	return Example{Messages: append(reward.JudgeMessages(&c.turn, "", reward.DefaultLimits()), assistant(fmt.Sprintf("%s \\boxed{%d}", e.reason, e.vote))),
		Key: key, Want: fmt.Sprint(e.vote)}
}
