package bundled_test

// An external test: it evaluates the model through pretrain, which opens
// it through the engine, which imports this package.

import (
	"context"
	"testing"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/pretrain"
	"github.com/clawrl/clawrl/tokenizer"
)

func TestBundledLoadsAndGenerates(t *testing.T) {
	dir, err := bundled.DirIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.VocabSize != tok.VocabSize() || c.Architecture != model.ArchLlama || !tok.HasChatTemplate() {
		t.Errorf("config %+v, vocabulary %d", c, tok.VocabSize())
	}
	if eos, _ := tok.EOS(); !c.IsEOS(int(eos)) {
		t.Error("the tokenizer's EOS does not end generation")
	}
	ev, err := pretrain.Evaluate(context.Background(), dir, pretrain.EvalOptions{Seed: 1, Arithmetic: 2, Tools: 1, Judge: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.Samples) == 0 {
		t.Fatal("no samples")
	}
	for _, s := range ev.Samples[:3] {
		t.Logf("%s → %q", s.Messages[len(s.Messages)-1].Content, s.Reply)
	}
}
