package corpus

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

// Instruction following: plain questions answered under a verifiable
// instruction of package instruct, placed where a user or the training
// loop puts one: in the system prompt, in the request, in the hint the
// teacher context appends to the last user message (reward.HintMarker),
// or in a user's correction of an earlier reply, after which the
// instruction holds for the rest of the conversation. Only the Trained
// kinds, in their Train phrasings and arguments, appear; the evaluation
// uses the held-out ones.

// followKinds weights the trained kinds: those a person states as a
// lasting preference most, more.
var followKinds = map[instruct.Kind]float64{
	instruct.EndWord: 5, instruct.StartPhrase: 4, instruct.IncludeWord: 2, instruct.AvoidWord: 1,
	instruct.Lowercase: 3, instruct.Uppercase: 3, instruct.Bullets: 2, instruct.Numbered: 2, instruct.JSONObject: 2,
	instruct.SignOff: 3, instruct.Exclaim: 2, instruct.NoCommas: 1, instruct.MaxWords: 1,
}

func randKind(r *rand.Rand) instruct.Kind {
	total := 0.0
	for _, k := range instruct.Trained {
		total += followKinds[k]
	}
	x := r.Float64() * total
	for _, k := range instruct.Trained {
		if x < followKinds[k] {
			return k
		}
		x -= followKinds[k]
	}
	return instruct.Trained[0]
}

// PlainQuestion returns a question with a plain-text answer (no tool, no
// JSON to read), from the training or the held-out split of questions:
// what an instruction is put on, and what `clawrl bench learn` asks.
func PlainQuestion(r *rand.Rand, heldOut bool) (q, a, key string) {
	for {
		q, a, key = plainQA(r)
		if HeldOut(key) == heldOut {
			return q, a, key
		}
	}
}

func plainQA(r *rand.Rand) (q, a, key string) {
	var x qa
	switch r.IntN(9) {
	case 0:
		p := pick(r, greetingPairs[:len(greetingPairs)-1]) // not the heartbeat
		q := pick(r, p[0])
		return q, pick(r, p[1]), "greet:" + q
	case 1:
		y := randArith(r)
		x = qa{Q: arithQuestion(r, y), A: y.equation() + ".", Key: y.key()}
	case 2:
		x = genUnits(r)
	case 3:
		x = genDates(r)
	case 4:
		x = genSpelling(r)
	case 5:
		x = genLists(r)
	case 6, 7:
		x = genInstructions(r)
	default:
		c := pick(r, capitals)
		x = qa{Q: fmt.Sprintf(pick(r, []string{"What is the capital of %s?", "Which city is the capital of %s?"}), c[0]),
			A: fmt.Sprintf("The capital of %s is %s.", c[0], c[1]), Key: "cap:" + c[0]}
	}
	return x.Q, x.A, x.Key
}

// randConstraints draws one trained constraint, sometimes two that can
// hold together.
func randConstraints(r *rand.Rand) []instruct.Constraint {
	cs := []instruct.Constraint{instruct.Random(r, randKind(r), instruct.Train)}
	if r.IntN(7) == 0 {
		c2 := instruct.Random(r, randKind(r), instruct.Train)
		if _, ok := applyAll([]instruct.Constraint{cs[0], c2}, "The capital of France is Paris."); ok && instruct.Compatible(cs[0], c2) {
			cs = append(cs, c2)
		}
	}
	return cs
}

// applyAll makes reply follow every constraint, in order; false if one
// cannot be met or a later one undoes an earlier one.
func applyAll(cs []instruct.Constraint, reply string) (string, bool) {
	for _, c := range cs {
		var ok bool
		if reply, ok = c.Apply(reply); !ok {
			return "", false
		}
	}
	for _, c := range cs {
		if !c.Check(reply) {
			return "", false
		}
	}
	return reply, true
}

// instructionText states the constraints as one text.
func instructionText(r *rand.Rand, cs []instruct.Constraint, split instruct.Split) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Instruction(r, split))
	}
	return strings.Join(s, " ")
}

// WithHint appends hint to a user message as the teacher context does.
func WithHint(content, hint string) string {
	return content + "\n\n" + reward.HintMarker + "\n" + hint
}

// constrainedQA draws a plain question whose answer can be made to follow
// cs.
func constrainedQA(r *rand.Rand, cs []instruct.Constraint) (q, a, key string) {
	for range 1000 {
		q, plain, key := plainQA(r)
		if a, ok := applyAll(cs, plain); ok {
			return q, a, key
		}
	}
	panic(fmt.Sprintf("pretrain: no plain answer follows %v", cs))
}

func genFollow(r *rand.Rand) Example {
	cs := randConstraints(r)
	instr := instructionText(r, cs, instruct.Train)
	var labels []string
	for _, c := range cs {
		labels = append(labels, c.String())
	}
	var msgs []tokenizer.Message
	var untrained []int
	q, a, key := constrainedQA(r, cs)
	switch k := r.IntN(20); {
	case k < 6: // the system prompt holds it, for every reply
		sys := instr
		if r.IntN(2) == 0 {
			sys = pick(r, shortSystems) + " " + instr
		}
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: sys}, user(q), assistant(a))
		for r.IntN(2) == 0 && len(msgs) < 7 {
			q2, a2, _ := constrainedQA(r, cs)
			if r.IntN(3) == 0 {
				q2 = instruct.Praise(r) + " " + q2
			}
			msgs = append(msgs, user(q2), assistant(a2))
		}
	case k < 12: // a hint after the request, as the teacher reads it
		hint := instr
		if r.IntN(3) == 0 && len(cs) == 1 {
			hint = instruct.Standing(instr)
		}
		if r.IntN(3) == 0 { // an earlier exchange without the instruction
			q0, a0, _ := plainQA(r)
			msgs = append(msgs, user(q0), assistant(a0))
		}
		msgs = append(msgs, user(WithHint(q, hint)), assistant(a))
	case k < 15: // in the request itself
		if r.IntN(2) == 0 {
			msgs = append(msgs, user(q+" "+instr))
		} else {
			msgs = append(msgs, user(instr+" "+q))
		}
		msgs = append(msgs, assistant(a))
	default: // a correction of an earlier reply; then it holds
		q0, plain0, redo, ok := violated(r, cs)
		if !ok { // a plain reply rarely breaks it (avoid a word): say it up front
			msgs = append(msgs, user(q+" "+instr), assistant(a))
			break
		}
		msgs = append(msgs, user(q0), assistant(plain0))
		var corr []string
		for _, c := range cs {
			corr = append(corr, c.Correction(r, instruct.Train))
		}
		fix := strings.Join(corr, " ")
		if r.IntN(2) == 0 { // redo the same answer
			msgs = append(msgs, user(fix), assistant(redo))
		} else { // and ask the next question in the same message
			msgs = append(msgs, user(fix+" "+q), assistant(a))
		}
		for r.IntN(2) == 0 && len(msgs) < 8 {
			q2, a2, _ := constrainedQA(r, cs)
			if r.IntN(2) == 0 {
				q2 = instruct.Praise(r) + " " + q2
			}
			msgs = append(msgs, user(q2), assistant(a2))
		}
	}
	return Example{Messages: msgs, Untrained: untrained, Key: "follow:" + strings.Join(labels, "+") + "|" + key}
}

// violated draws a plain question whose plain answer breaks cs and can be
// mended; false after a bounded search (some constraints, like avoiding a
// word, a plain answer rarely breaks).
func violated(r *rand.Rand, cs []instruct.Constraint) (q, plain, mended string, ok bool) {
	for range 50 {
		q, plain, _ = plainQA(r)
		if m, ok := applyAll(cs, plain); ok && m != plain {
			return q, plain, m, true
		}
	}
	return "", "", "", false
}
