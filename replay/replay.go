// Package replay supplies the samples each training step learns beside
// users' turns, so that learning what one person wants does not wear away
// what the model could already do.
//
// Training on a handful of graded turns moves a small model fast: on the
// bundled model a learnt preference (lowercase, a bulleted list, a closing
// word) came with answers that forgot their content ("the capital of spain
// is mice.", "8 × 9 = 76.", a list of bare dashes), while a KL penalty to
// the base on the same turns did not stop it. Replay mixes supervised
// examples of what the model already does well into every step: the
// pretraining-mix term of InstructGPT's PPO-ptx. Each replay sample is the
// example's last assistant reply with a constant per-token advantage (the
// replay weight): under the trainer's PPO-clip loss, at ratio 1, that is
// the weighted log-likelihood of the reply, so the step pulls towards the
// examples as well as towards the users' signal.
//
// A Source draws examples from the bundled model's own pretraining corpus
// (package corpus: arithmetic, tool calls, plain questions, instructions
// in the system prompt, ...; never its held-out questions) or from a JSONL
// file of conversations for any other checkpoint.
package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"

	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/trainer"
)

// Options configure a Source.
type Options struct {
	// Weight is the advantage of every replayed token (> 0).
	Weight float64
	// MaxTokens bounds a sample's prompt plus reply; longer examples are
	// skipped (the trainer's context and micro-batch budget).
	MaxTokens int
	// Seed makes the draws deterministic: the draws for a version depend
	// only on the seed, the version and (for a file) the draws before them
	// in this process. Versions never repeat, so a resumed daemon does not
	// replay the examples of its first steps again.
	Seed uint64
}

func (o Options) validate() error {
	if !(o.Weight > 0) || math.IsInf(o.Weight, 0) {
		return fmt.Errorf("replay: weight %v must be positive and finite", o.Weight)
	}
	if o.MaxTokens < 2 {
		return fmt.Errorf("replay: max tokens %d must be at least 2", o.MaxTokens)
	}
	return nil
}

// Source draws replay samples. It is safe for concurrent use.
type Source struct {
	opts Options
	desc string

	mu sync.Mutex
	// draw returns the next example as a sample (its Prompt and Response
	// may be shared between draws: the trainer only reads them), or an
	// error for one that does not fit.
	draw func(r *rand.Rand) (trainer.Sample, error)
}

// CorpusMix is the category mix a corpus Source draws with by default:
// the corpus's own weights for everything the served policy does. The
// judge's own categories are left out, since the local judge runs the
// base's frozen weights, not the trained ones.
var CorpusMix = map[string]float64{corpus.CatJudge: 0, corpus.CatJudgeSession: 0}

// Corpus returns a Source over the pretraining corpus of the bundled
// model, drawn with the corpus's own category weights as changed by mix
// (see corpus.Generator.SetMix; nil: CorpusMix), never a held-out
// question. It fits the bundled model and checkpoints trained from it (the
// chat template and the corpus's format must be theirs).
func Corpus(tok *tokenizer.Tokenizer, mix map[string]float64, opts Options) (*Source, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if mix == nil {
		mix = CorpusMix
	}
	g := corpus.NewGenerator(nil)
	if err := g.SetMix(mix); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	s := &Source{opts: opts, desc: "the bundled pretraining corpus",
		draw: func(r *rand.Rand) (trainer.Sample, error) { return encode(tok, g.Next(r), opts.MaxTokens) }}
	if _, err := s.Samples(1, 0); err != nil {
		return nil, err
	}
	return s, nil
}

// fileLine is one line of a replay file: an OpenAI-style conversation
// whose last message is the assistant's reply to learn.
type fileLine struct {
	Messages []tokenizer.Message `json:"messages"`
	Tools    []json.RawMessage   `json:"tools,omitempty"`
}

// maxFileBytes bounds a replay file: it is read into memory whole.
const maxFileBytes = 256 << 20

// File returns a Source over the conversations of a JSONL file, one
// {"messages": [...], "tools": [...]} object per line (blank lines
// skipped), each ending with an assistant message. Every line is parsed
// and encoded through the chat template once, up front: a bad line is refused
// with the path, its line number and the reason, not found in the middle
// of training. Lines are replayed in a shuffled order, reshuffled after
// each pass.
func File(path string, tok *tokenizer.Tokenizer, opts Options) (*Source, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	var encoded []trainer.Sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n, size := 0, 0
	for sc.Scan() {
		n++
		size += len(sc.Bytes()) + 1
		if size > maxFileBytes {
			return nil, fmt.Errorf("replay: %s: larger than %d MiB", path, maxFileBytes>>20)
		}
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		ex, err := parseLine(line)
		var smp trainer.Sample
		if err == nil {
			smp, err = encode(tok, ex, opts.MaxTokens)
		}
		if err != nil {
			return nil, fmt.Errorf("replay: %s:%d: %w", path, n, err)
		}
		encoded = append(encoded, smp)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("replay: %s: %w", path, err)
	}
	if len(encoded) == 0 {
		return nil, fmt.Errorf("replay: %s: no conversations", path)
	}
	var order []int
	return &Source{opts: opts, desc: path, draw: func(r *rand.Rand) (trainer.Sample, error) {
		if len(order) == 0 {
			order = r.Perm(len(encoded))
		}
		i := order[0]
		order = order[1:]
		return encoded[i], nil
	}}, nil
}

func parseLine(line []byte) (corpus.Example, error) {
	var fl fileLine
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fl); err != nil {
		return corpus.Example{}, fmt.Errorf("not a {\"messages\": [...]} object: %w", err)
	}
	if len(fl.Messages) < 2 {
		return corpus.Example{}, errors.New("a conversation needs a prompt and an assistant reply")
	}
	for i, m := range fl.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return corpus.Example{}, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	if last := fl.Messages[len(fl.Messages)-1]; last.Role != "assistant" {
		return corpus.Example{}, fmt.Errorf("the last message is %q; it must be the assistant's reply to learn", last.Role)
	}
	return corpus.Example{Category: "file", Messages: fl.Messages, Tools: fl.Tools}, nil
}

// String says where the samples come from.
func (s *Source) String() string { return s.desc }

// Samples draws n samples, stamped with version (the trainer's current
// one: replayed examples are never stale).
func (s *Source) Samples(n int, version uint64) ([]trainer.Sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := rand.New(rand.NewPCG(s.opts.Seed, version^0x4e91a7))
	out := make([]trainer.Sample, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries >= 20*n+20 {
			return nil, fmt.Errorf("replay: %s: only %d of %d draws fit in %d tokens with a reply to learn", s.desc, len(out), n, s.opts.MaxTokens)
		}
		smp, err := s.draw(r)
		if err != nil {
			continue
		}
		smp.Version, smp.Supervised = version, true
		smp.Advantages = make([]float32, len(smp.Response))
		for i := range smp.Advantages {
			smp.Advantages[i] = float32(s.opts.Weight)
		}
		out = append(out, smp)
	}
	return out, nil
}

// encode turns a conversation into a sample: the last assistant reply (its
// closing token included) is the response, everything before it the
// prompt, tokenized as pretraining and serving tokenize them.
func encode(tok *tokenizer.Tokenizer, ex corpus.Example, maxTokens int) (trainer.Sample, error) {
	enc, err := corpus.Encode(tok, ex)
	if err != nil {
		return trainer.Sample{}, err
	}
	end := len(enc.IDs)
	start := end
	for start > 0 && enc.Train[start-1] {
		start--
	}
	switch {
	case start == end:
		return trainer.Sample{}, errors.New("the last assistant reply is not trained")
	case start == 0:
		return trainer.Sample{}, errors.New("the reply has no prompt before it")
	case end > maxTokens:
		return trainer.Sample{}, fmt.Errorf("%d tokens, more than the %d allowed", end, maxTokens)
	}
	return trainer.Sample{ResponseID: "replay", Prompt: enc.IDs[:start], Response: enc.IDs[start:end]}, nil
}
