package export

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/weights"
)

// trainerState is the part of a checkpoint's trainer_state.json an adapter
// export reads (package trainer writes it).
type trainerState struct {
	LoRA *struct {
		Rank    int      `json:"rank"`
		Alpha   float64  `json:"alpha"`
		Targets []string `json:"targets"`
	} `json:"lora"`
	Params []struct {
		Name  string `json:"name"`
		Shape []int  `json:"shape"`
	} `json:"params"`
}

// valuePrefix prefixes a trained parameter's value in
// trainer_state.safetensors (beside its Adam moments).
const valuePrefix = "value/"

// readState reads and verifies c's trainer_state.json.
func readState(c *weights.Checkpoint) (*trainerState, error) {
	if !c.Has(weights.StateJSONFile) || !c.Has(weights.StateTensorsFile) {
		return nil, fmt.Errorf("export: %s: no trainer state (%s, %s): the version was not made by training, so it has no adapter",
			c.Dir(), weights.StateJSONFile, weights.StateTensorsFile)
	}
	raw, err := c.ReadFile(weights.StateJSONFile)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	var st trainerState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("export: %s: %w", c.Path(weights.StateJSONFile), err)
	}
	return &st, nil
}

// moduleName is the PEFT target module of a trainer LoRA target ("q" or
// "q_proj" → "q_proj").
func moduleName(t string) string {
	if strings.HasSuffix(t, "_proj") {
		return t
	}
	return t + "_proj"
}

// writeAdapter writes adapter_model.safetensors: each LoRA A and B of the
// checkpoint's trainer state under its PEFT name, in opts.DType (auto:
// F32, as trained). It returns the tensors' torch dtype.
func (x *exporter) writeAdapter(st *trainerState) (string, error) {
	path := x.c.Path(weights.StateTensorsFile)
	f, err := safetensors.Open(path)
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	defer f.Close()
	var names, outNames []string
	for _, p := range st.Params {
		if !strings.HasSuffix(p.Name, ".lora_A.weight") && !strings.HasSuffix(p.Name, ".lora_B.weight") {
			return "", fmt.Errorf("export: %s: parameter %q is not a LoRA matrix", x.c.Path(weights.StateJSONFile), p.Name)
		}
		info, ok := f.Info(valuePrefix + p.Name)
		if !ok {
			return "", fmt.Errorf("export: %s: tensor %q missing", path, valuePrefix+p.Name)
		}
		if !slices.Equal(info.Shape, p.Shape) {
			return "", fmt.Errorf("export: %s: tensor %q has shape %v, %s says %v", path, p.Name, info.Shape, weights.StateJSONFile, p.Shape)
		}
		names = append(names, valuePrefix+p.Name)
		outNames = append(outNames, p.Name)
	}
	if len(names) == 0 {
		return "", fmt.Errorf("export: %s: no LoRA parameters", x.c.Path(weights.StateJSONFile))
	}
	tensors, err := convertTensors(f, names, outNames, x.opts.DType)
	if err != nil {
		return "", err
	}
	if err := x.writeSafetensors(AdapterModelFile, tensors, map[string]string{"format": "pt"}); err != nil {
		return "", err
	}
	return torchName(tensors[0].DType)
}

// writeAdapterConfig writes PEFT's adapter_config.json: scale
// lora_alpha/r, as the trainer's alpha/rank.
func (x *exporter) writeAdapterConfig(st *trainerState) error {
	targets := make([]string, 0, len(st.LoRA.Targets))
	for _, t := range st.LoRA.Targets {
		targets = append(targets, moduleName(t))
	}
	alpha := st.LoRA.Alpha
	if alpha == 0 {
		alpha = float64(st.LoRA.Rank)
	}
	return x.writeJSON(AdapterConfigFile, map[string]any{
		"peft_type":               "LORA",
		"task_type":               "CAUSAL_LM",
		"base_model_name_or_path": x.baseName(),
		"r":                       st.LoRA.Rank,
		"lora_alpha":              alpha,
		"lora_dropout":            0.0,
		"target_modules":          targets,
		"bias":                    "none",
		"fan_in_fan_out":          false,
		"use_rslora":              false,
		"use_dora":                false,
		"init_lora_weights":       true,
		"inference_mode":          true,
		"modules_to_save":         nil,
		"revision":                nil,
	})
}

// baseName is how the export names its base model.
func (x *exporter) baseName() string {
	switch {
	case x.opts.BaseName != "":
		return x.opts.BaseName
	case x.opts.BaseDir != "":
		if abs, err := filepath.Abs(x.opts.BaseDir); err == nil {
			return abs
		}
		return x.opts.BaseDir
	case x.c.Manifest.Adapters != nil:
		return x.c.Manifest.Adapters.Path
	}
	return x.c.Manifest.Meta.Base
}

// writeCard writes README.md, a model card saying where the weights came
// from and how to load them.
func (x *exporter) writeCard(kind string) error {
	m := x.c.Manifest
	var b strings.Builder
	b.WriteString("---\nlibrary_name: ")
	if kind == "adapter" {
		b.WriteString("peft\n")
	} else {
		b.WriteString("transformers\n")
	}
	b.WriteString("tags:\n- clawrl\n---\n\n")
	fmt.Fprintf(&b, "%s%d, exported by clawrl\n\n", cardTitle, m.Version)
	if kind == "adapter" {
		b.WriteString("A LoRA adapter (PEFT layout) trained online by clawrl from users' feedback.\n\n")
	} else {
		b.WriteString("A model trained online by clawrl from users' feedback, in Hugging Face layout (the LoRA adapters, if any, are merged).\n\n")
	}
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	b.WriteString("| | |\n|---|---|\n")
	row("weight version", fmt.Sprint(m.Version))
	row("parent version", fmt.Sprint(m.Parent))
	row("created", m.Created.UTC().Format("2006-01-02 15:04:05 UTC"))
	row("exported", x.opts.Now.UTC().Format("2006-01-02 15:04:05 UTC"))
	row("optimizer steps since the base", fmt.Sprint(m.Meta.Step))
	row("samples trained on", fmt.Sprint(m.Meta.Samples))
	row("response tokens trained on", fmt.Sprint(m.Meta.Tokens))
	if m.Meta.Note != "" {
		row("note", m.Meta.Note)
	}
	if m.Meta.Base != "" {
		row("base model fingerprint", m.Meta.Base)
	}
	if name := x.baseName(); name != "" {
		row("base model", name)
	}
	row("dtype", x.torchDType)
	b.WriteString("\n## Loading\n\n```python\n")
	if kind == "adapter" {
		b.WriteString("from peft import AutoPeftModelForCausalLM\nmodel = AutoPeftModelForCausalLM.from_pretrained(\"<this directory>\")\n")
	} else {
		fmt.Fprintf(&b, "from transformers import AutoModelForCausalLM, AutoTokenizer\nmodel = AutoModelForCausalLM.from_pretrained(\"<this directory>\", torch_dtype=\"auto\")\ntokenizer = AutoTokenizer.from_pretrained(\"<this directory>\")\n")
	}
	b.WriteString("```\n\nOr serve it with clawrl: `model: {path: <this directory>}` in config.yaml.\n")
	return x.writeBytes(CardFile, []byte(b.String()))
}
