package pretrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/clawrl/clawrl/atomicfile"
	"github.com/clawrl/clawrl/safetensors"
)

// GrowDepth writes into dst (created if needed) the checkpoint in src with
// layers decoder layers instead of its own n, n < layers ≤ 2n: the config
// with the new depth, the tokenizer files unchanged, and weights in which
// layers−n copies of src's layers are inserted, spread evenly, each right
// after the layer it copies. A copy's attention output projection
// (o_proj) and MLP down projection (down_proj) are zero, so it adds
// nothing to the residual stream and the grown model computes exactly
// what src computes; training then makes use of the new depth. This is
// the block expansion of LLaMA Pro (Wu et al., 2024), and how `clawrl
// pretrain --init DIR --layers N` continues a checkpoint at a larger size.
func GrowDepth(src, dst string, layers int) error {
	fail := func(err error) error { return fmt.Errorf("pretrain: grow %s to %d layers: %w", src, layers, err) }
	cfgPath := filepath.Join(src, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return fail(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return fail(fmt.Errorf("%s: %w", cfgPath, err))
	}
	num, ok := cfg["num_hidden_layers"].(json.Number)
	if !ok {
		return fail(fmt.Errorf("%s: no num_hidden_layers", cfgPath))
	}
	n64, err := num.Int64()
	if err != nil || n64 < 1 {
		return fail(fmt.Errorf("%s: num_hidden_layers %s is not a positive integer", cfgPath, num))
	}
	n := int(n64)
	if layers <= n || layers > 2*n {
		return fail(fmt.Errorf("the checkpoint has %d layers; growing needs more than %d and at most %d (twice as many)", n, n, 2*n))
	}
	plan := growPlan(n, layers)

	ck, err := safetensors.OpenDir(src)
	if err != nil {
		return fail(err)
	}
	defer ck.Close()
	var out []safetensors.WriteTensor
	perLayer := map[int][]string{} // old layer → its tensors' names after "model.layers.N."
	for _, name := range ck.Names() {
		layer, rest, isLayer := splitLayerName(name)
		if isLayer {
			if layer < 0 || layer >= n {
				return fail(fmt.Errorf("tensor %s: layer %d of a %d-layer model", name, layer, n))
			}
			perLayer[layer] = append(perLayer[layer], rest)
			continue
		}
		t, err := readTensor(ck, name)
		if err != nil {
			return fail(err)
		}
		out = append(out, t)
	}
	for newLayer, p := range plan {
		for _, rest := range perLayer[p.from] {
			t, err := readTensor(ck, fmt.Sprintf("model.layers.%d.%s", p.from, rest))
			if err != nil {
				return fail(err)
			}
			t.Name = fmt.Sprintf("model.layers.%d.%s", newLayer, rest)
			if p.copy && (rest == "self_attn.o_proj.weight" || rest == "mlp.down_proj.weight" ||
				rest == "self_attn.o_proj.bias" || rest == "mlp.down_proj.bias") {
				t.Data = make([]byte, len(t.Data))
			}
			out = append(out, t)
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fail(err)
	}
	if err := safetensors.WriteFile(filepath.Join(dst, safetensors.SingleFile), out, map[string]string{"format": "pt"}); err != nil {
		return fail(err)
	}
	cfg["num_hidden_layers"] = json.Number(strconv.Itoa(layers))
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := atomicfile.WriteBytes(filepath.Join(dst, "config.json"), 0o644, append(cj, '\n')); err != nil {
		return fail(err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := copyFile(filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
			return fail(err)
		}
	}
	return nil
}

// growStep says where a layer of the grown model comes from: src's layer
// from, as it is or as an identity copy.
type growStep struct {
	from int
	copy bool
}

// growPlan lays out a model of layers layers grown from n: every old layer
// in order, with a copy after old layer ⌈(k+1)·n/p⌉−1 for k < p = layers−n
// (distinct for p ≤ n, the last one after the last layer).
func growPlan(n, layers int) []growStep {
	p := layers - n
	after := make(map[int]bool, p)
	for k := range p {
		after[((k+1)*n+p-1)/p-1] = true
	}
	plan := make([]growStep, 0, layers)
	for i := range n {
		plan = append(plan, growStep{from: i})
		if after[i] {
			plan = append(plan, growStep{from: i, copy: true})
		}
	}
	return plan
}

// splitLayerName splits "model.layers.3.mlp.up_proj.weight" into 3 and
// "mlp.up_proj.weight".
func splitLayerName(name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return 0, "", false
	}
	idx, tail, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", false
	}
	i, err := strconv.Atoi(idx)
	if err != nil {
		return 0, "", false
	}
	return i, tail, true
}

// readTensor reads a tensor of ck, bytes and all, for writing (the bytes
// are ck's: valid until it is closed).
func readTensor(ck *safetensors.Checkpoint, name string) (safetensors.WriteTensor, error) {
	f, info, err := ck.Find(name)
	if err != nil {
		return safetensors.WriteTensor{}, err
	}
	b, err := f.Bytes(name)
	if err != nil {
		return safetensors.WriteTensor{}, err
	}
	return safetensors.WriteTensor{Name: name, DType: info.DType, Shape: info.Shape, Data: b}, nil
}
